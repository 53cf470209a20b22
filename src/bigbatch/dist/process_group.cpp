#include "bigbatch/dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef BIGBATCH_WITH_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "bigbatch/core/check.h"

namespace bigbatch::dist {

std::string nccl_version() {
#ifdef BIGBATCH_WITH_NCCL
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

Backend parse_backend(const std::string& text, bool cuda, const std::string& field) {
#ifdef BIGBATCH_WITH_NCCL
  const bool have_nccl = true;
#else
  const bool have_nccl = false;
#endif
  if (text == "gloo")
    return Backend::kGloo;
  if (text == "auto")
    return have_nccl && cuda ? Backend::kNccl : Backend::kGloo;
  if (text == "nccl") {
    BB_CHECK_INPUT(have_nccl, field,
                   " = \"nccl\" needs a build with CUDA and NCCL (BIGBATCH_WITH_NCCL); this one "
                   "has Gloo only: use \"gloo\" or \"auto\"");
    return Backend::kNccl;
  }
  throw InputError(
      cat(field, " = \"", text, "\" is not a backend; expected \"auto\", \"gloo\" or \"nccl\""));
}

std::vector<EnvironmentSetting> prepare_nccl_error_handling() {
  struct Wanted {
    const char* name;
    const char* legacy_name;  ///< the older spelling, which LibTorch reads too
    const char* value;
  };
  const Wanted wanted[] = {{"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT", "1"},
                           {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "2"}};
  std::vector<EnvironmentSetting> settings;
  for (const Wanted& variable : wanted) {
    EnvironmentSetting setting{variable.name, variable.value, false};
    for (const char* name : {variable.name, variable.legacy_name}) {
      if (const char* existing = std::getenv(name)) {
        setting = EnvironmentSetting{name, existing, true};
        break;
      }
    }
    if (!setting.already_set)
      ::setenv(variable.name, variable.value, /*overwrite=*/0);
    settings.push_back(setting);
  }
  return settings;
}

std::string to_string(Backend backend) {
  return backend == Backend::kNccl ? "nccl" : "gloo";
}

namespace {

using Clock = std::chrono::steady_clock;

double now_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

/// The first line of an exception's message, without LibTorch's backtrace.
std::string first_line(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = torch_error != nullptr ? torch_error->what_without_backtrace() : error.what();
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

std::string heartbeat_key(int64_t rank) {
  return cat("bigbatch/heartbeat/", rank);
}

c10::intrusive_ptr<c10d::TCPStore> store_client(const WorkerEnvironment& worker, double timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(worker.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = to_milliseconds(timeout);
  return c10::make_intrusive<c10d::TCPStore>(worker.master_addr, options);
}

/// Counts up a key in the store every `period` seconds from a thread of its own (with a store
/// connection of its own), so that after a failed collective the others can tell which rank
/// stopped.
class Heartbeat {
 public:
  Heartbeat(const WorkerEnvironment& worker, double period, double timeout)
      : store_(store_client(worker, timeout)), key_(heartbeat_key(worker.rank)), period_(period) {
    store_->add(key_, 1);
    thread_ = std::thread([this] { run(); });
  }
  /// Only for a heartbeat whose store host is alive: the thread is joined. After a failure the
  /// owner leaks the heartbeat instead (its thread may be stuck in a call to a stopped host).
  ~Heartbeat() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (
        !wake_.wait_for(lock, std::chrono::duration<double>(period_), [this] { return stop_; })) {
      lock.unlock();
      try {
        store_->add(key_, 1);
      } catch (const std::exception&) {
        return;  // the store host is gone: the collectives will report it
      }
      lock.lock();
    }
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::string key_;
  double period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

/// Which ranks stopped beating, found by reading every heartbeat twice, `interval` seconds apart,
/// through a new store connection; gives up after `deadline` seconds (a stopped store host).
std::string find_stopped_ranks(const WorkerEnvironment& worker, double interval, double deadline) {
  auto probe = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = probe->get_future();
  std::thread([worker, interval, probe] {
    try {
      auto store = store_client(worker, interval + 2.0);
      std::vector<int64_t> before(worker.world_size);
      for (int64_t rank = 0; rank < worker.world_size; ++rank)
        before[rank] = store->add(heartbeat_key(rank), 0);
      std::this_thread::sleep_for(std::chrono::duration<double>(interval));
      std::string stopped;
      for (int64_t rank = 0; rank < worker.world_size; ++rank) {
        if (rank != worker.rank && store->add(heartbeat_key(rank), 0) == before[rank])
          stopped += cat(stopped.empty() ? "" : ", ", rank);
      }
      probe->set_value(stopped.empty()
                           ? std::string("every other rank's heartbeat is still beating (a rank "
                                         "may be stuck, or the network broke)")
                           : cat("rank ", stopped, " stopped responding (no heartbeat for ",
                                 interval, " s: it died, hangs or was stopped)"));
    } catch (const std::exception& error) {
      probe->set_value(cat("rank 0, which hosts the rendezvous store at ", worker.master_addr, ":",
                           worker.master_port, ", is not responding (", first_line(error), ")"));
    }
  }).detach();
  if (result.wait_for(std::chrono::duration<double>(deadline)) == std::future_status::ready)
    return result.get();
  return cat("rank 0, which hosts the rendezvous store at ", worker.master_addr, ":",
             worker.master_port, ", is not responding (it hangs or was stopped)");
}

/// The network device Gloo binds to: loopback for a job on one machine, the interface in
/// GLOO_SOCKET_IFNAME when set, else the address this machine's hostname resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const WorkerEnvironment& worker) {
  const std::string& addr = worker.master_addr;
  if (addr == "127.0.0.1" || addr == "localhost" || addr == "::1")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

class GroupCommunicator;

/// A c10d work item; its end time is recorded by a callback on its future.
class GroupWork : public PendingWork {
 public:
  /// `result` (defined when the collective ran on a staged device copy) is copied into `target`
  /// after the wait.
  GroupWork(c10::intrusive_ptr<c10d::Work> work, GroupCommunicator& owner, std::string what,
            torch::Tensor result = {}, torch::Tensor target = {});
  void wait() override;
  double finished_at() const override { return finished_at_->load(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  GroupCommunicator& owner_;
  std::string what_;
  torch::Tensor result_;
  torch::Tensor target_;
  double started_at_;
  std::shared_ptr<std::atomic<double>> finished_at_ = std::make_shared<std::atomic<double>>(0.0);
};

class GroupCommunicator : public Communicator {
 public:
  explicit GroupCommunicator(const ProcessGroupOptions& options) : options_(options) {
    const WorkerEnvironment& worker = options.worker();
    const std::string where = cat(worker.master_addr, ":", worker.master_port);
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<uint16_t>(worker.master_port);
      store_options.isServer = worker.rank == 0;
      store_options.waitWorkers = false;
      store_options.timeout = to_milliseconds(options.timeout_seconds());
      store_ = c10::make_intrusive<c10d::TCPStore>(worker.master_addr, store_options);
    } catch (const std::exception& error) {
      throw DistError(cat("rank ", worker.rank, ": ",
                          worker.rank == 0 ? "could not open the rendezvous store at "
                                           : "could not reach the rendezvous store at ",
                          where, " within ", options.timeout_seconds(),
                          " s (dist.timeout): ", first_line(error),
                          worker.rank == 0 ? "; is the port in use? Set MASTER_PORT to a free one"
                                           : "; is rank 0 running, and MASTER_ADDR/MASTER_PORT "
                                             "right?"));
    }
    try {
      heartbeat_ = std::make_unique<Heartbeat>(worker, options.heartbeat_seconds(),
                                               options.timeout_seconds());
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>("bigbatch/group", store_);
      const int rank = static_cast<int>(worker.rank);
      const int size = static_cast<int>(worker.world_size);
      const auto timeout = to_milliseconds(options.timeout_seconds());
#ifdef BIGBATCH_WITH_NCCL
      if (options.backend() == Backend::kNccl) {
        prepare_nccl_error_handling();  // a dead peer must reach fail(), not the watchdog's abort
        auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
        nccl_options->timeout = timeout;
        nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, nccl_options);
        device_ = torch::Device(torch::kCUDA, static_cast<int16_t>(worker.local_rank));
      }
#endif
      if (options.backend() == Backend::kGloo) {
        auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
        gloo_options->devices.push_back(gloo_device(worker));
        gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, gloo_options);
      }
    } catch (const std::exception& error) {
      failed_ = true;
      throw DistError(cat("rank ", worker.rank, ": the ", worker.world_size,
                          " ranks did not all join through ", where, " within ",
                          options.timeout_seconds(), " s (dist.timeout): ", first_line(error),
                          ". Start every rank with the same WORLD_SIZE, MASTER_ADDR and "
                          "MASTER_PORT"));
    }
  }

  ~GroupCommunicator() override {
    if (!failed_)
      return;
    // Its threads may be blocked on a dead or stopped peer: destroying the group (or the
    // heartbeat) would join them and wait out their timeouts, or free what they still use. The
    // process is about to exit; leave them all as they are.
    (void)heartbeat_.release();
    (void)gloo_.release();
    (void)store_.release();
#ifdef BIGBATCH_WITH_NCCL
    (void)nccl_.release();
#endif
  }

  int64_t rank() const override {
    return options_.worker().rank;
  }
  int64_t world_size() const override {
    return options_.worker().world_size;
  }

  std::unique_ptr<PendingWork> start_all_reduce(torch::Tensor tensor, Traffic traffic,
                                                const std::string& what) override {
    count(traffic, tensor);
    std::vector<torch::Tensor> tensors{staged(tensor)};
    auto work = guard(what, [&](auto& group) { return group.allreduce(tensors); });
    if (tensors[0].is_same(tensor))
      return std::make_unique<GroupWork>(std::move(work), *this, what);
    return std::make_unique<GroupWork>(std::move(work), *this, what, tensors[0], tensor);
  }

  void broadcast(torch::Tensor tensor, int64_t root, const std::string& what) override {
    count(Traffic::kControl, tensor);
    std::vector<torch::Tensor> tensors{staged(tensor)};
    c10d::BroadcastOptions broadcast_options;
    broadcast_options.rootRank = root;
    GroupWork(guard(what, [&](auto& group) { return group.broadcast(tensors, broadcast_options); }),
              *this, what, tensors[0], tensor)
        .wait();
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor,
                                        const std::string& what) override {
    count(Traffic::kControl, tensor);
    std::vector<torch::Tensor> inputs{staged(tensor.contiguous())};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int64_t rank = 0; rank < world_size(); ++rank)
      outputs[0].push_back(torch::empty_like(inputs[0]));
    GroupWork(guard(what, [&](auto& group) { return group.allgather(outputs, inputs); }), *this,
              what)
        .wait();
    std::vector<torch::Tensor> gathered;
    for (const torch::Tensor& output : outputs[0])
      gathered.push_back(output.to(tensor.device()));
    return gathered;
  }

  CommStats stats() const override {
    const std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }

  /// Turns a failed operation into a DistError naming this rank, the operation and the rank
  /// that stopped; the group is unusable from now on.
  [[noreturn]] void fail(const std::string& what, double started_at, const std::exception& error) {
    failed_ = true;
    const WorkerEnvironment& worker = options_.worker();
    const double waited = now_seconds() - started_at;
    const double interval = std::max(1.0, 3.0 * options_.heartbeat_seconds());
    throw DistError(cat("rank ", worker.rank, " of ", worker.world_size, ": ", what,
                        " failed after ", static_cast<int64_t>(waited * 10.0) / 10.0,
                        " s (dist.timeout = ", options_.timeout_seconds(),
                        " s): ", first_line(error), ". ",
                        find_stopped_ranks(worker, interval, interval + 3.0)));
  }

 private:
  /// `tensor` where the backend can reach it: itself for Gloo (CPU) and for NCCL when it is on
  /// this rank's GPU; a copy on that GPU otherwise (the caller's counts and flags live on the
  /// CPU).
  torch::Tensor staged(const torch::Tensor& tensor) const {
    if (tensor.device() == device_)
      return tensor;
    return tensor.to(device_);
  }

  void count(Traffic traffic, const torch::Tensor& tensor) {
    const std::lock_guard<std::mutex> lock(stats_mutex_);
    CommCounter& counter = traffic == Traffic::kGradients ? stats_.gradients : stats_.control;
    ++counter.calls;
    counter.bytes += static_cast<int64_t>(tensor.numel() * tensor.element_size());
  }

  /// Calls `launch` on the backend in use, turning an error at launch into a DistError.
  template <typename Launch>
  c10::intrusive_ptr<c10d::Work> guard(const std::string& what, Launch launch) {
    BB_CHECK(!failed_, "a collective (", what, ") after an earlier one failed");
    const double started_at = now_seconds();
    try {
#ifdef BIGBATCH_WITH_NCCL
      if (nccl_)
        return launch(*nccl_);
#endif
      return launch(*gloo_);
    } catch (const std::exception& error) {
      fail(what, started_at, error);
    }
  }

  ProcessGroupOptions options_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::unique_ptr<Heartbeat> heartbeat_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
#ifdef BIGBATCH_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
#endif
  torch::Device device_{torch::kCPU};  ///< where the backend's tensors live
  std::atomic<bool> failed_{false};
  mutable std::mutex stats_mutex_;
  CommStats stats_;
};

GroupWork::GroupWork(c10::intrusive_ptr<c10d::Work> work, GroupCommunicator& owner,
                     std::string what, torch::Tensor result, torch::Tensor target)
    : work_(std::move(work)),
      owner_(owner),
      what_(std::move(what)),
      result_(std::move(result)),
      target_(std::move(target)),
      started_at_(now_seconds()) {
  std::shared_ptr<std::atomic<double>> finished = finished_at_;
  work_->getFuture()->addCallback(
      [finished](c10::ivalue::Future&) { finished->store(now_seconds()); });
}

void GroupWork::wait() {
  try {
    work_->wait();
  } catch (const std::exception& error) {
    owner_.fail(what_, started_at_, error);
  }
  if (result_.defined())
    target_.copy_(result_);
  if (finished_at_->load() == 0.0)
    finished_at_->store(now_seconds());
}

}  // namespace

std::unique_ptr<Communicator> connect(const ProcessGroupOptions& options) {
  const WorkerEnvironment& worker = options.worker();
  BB_CHECK_INPUT(worker.world_size >= 1 && worker.rank >= 0 && worker.rank < worker.world_size,
                 "rank ", worker.rank, " is not in a job of ", worker.world_size, " ranks");
  BB_CHECK_INPUT(options.timeout_seconds() > 0, "dist.timeout = ", options.timeout_seconds(),
                 " must be positive (seconds)");
  return std::make_unique<GroupCommunicator>(options);
}

}  // namespace bigbatch::dist
