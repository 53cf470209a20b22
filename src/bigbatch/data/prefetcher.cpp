#include "bigbatch/data/prefetcher.h"

#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/threads.h"

namespace bigbatch::data {

Prefetcher::Prefetcher(const Dataset& dataset, int64_t depth) : dataset_(dataset), depth_(depth) {
  BB_CHECK_INPUT(depth >= 0, "prefetch depth must be >= 0 batches, got ", depth);
  if (depth_ > 0)
    worker_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  if (worker_.joinable())
    worker_.join();
}

void Prefetcher::request(std::vector<int64_t> indices) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    Slot slot;
    slot.indices = std::move(indices);
    slots_.push_back(std::move(slot));
  }
  work_.notify_all();
}

Batch Prefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  BB_CHECK(!slots_.empty(), "Prefetcher::next() called with no pending request");
  if (depth_ == 0) {
    const std::vector<int64_t> indices = std::move(slots_.front().indices);
    slots_.pop_front();
    lock.unlock();
    return gather(indices);
  }
  changed_.wait(lock, [this] { return slots_.front().done; });
  Slot slot = std::move(slots_.front());
  slots_.pop_front();
  --gathered_;
  lock.unlock();
  work_.notify_all();  // a place is free
  if (slot.error)
    std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

void Prefetcher::clear() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++generation_;
  slots_.clear();
  gathered_ = 0;
  changed_.wait(lock, [this] { return !busy_; });
}

int64_t Prefetcher::pending() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(slots_.size());
}

void Prefetcher::pin_batches() {
  const std::lock_guard<std::mutex> lock(mutex_);
  BB_CHECK(slots_.empty(), "Prefetcher::pin_batches() after ", slots_.size(), " requests");
  pin_ = true;
}

Batch Prefetcher::gather(const std::vector<int64_t>& indices) const {
  Batch batch = dataset_.get(indices);
  if (pin_) {
    batch.inputs = batch.inputs.pin_memory();
    batch.targets = batch.targets.pin_memory();
  }
  return batch;
}

void Prefetcher::run() {
  use_one_intra_op_thread_on_this_thread();  // the training thread has the cores
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] {
      return stop_ || (gathered_ < slots_.size() && static_cast<int64_t>(gathered_) < depth_);
    });
    if (stop_)
      return;
    const std::vector<int64_t> indices = slots_[gathered_].indices;
    const uint64_t generation = generation_;
    busy_ = true;
    lock.unlock();

    Batch batch;
    std::exception_ptr error;
    try {
      const torch::NoGradGuard no_grad;
      batch = gather(indices);
    } catch (...) {
      error = std::current_exception();
    }

    lock.lock();
    if (generation == generation_) {
      Slot& slot = slots_[gathered_];
      slot.batch = std::move(batch);
      slot.error = std::move(error);
      slot.done = true;
      ++gathered_;
    } else {
      batch = Batch{};  // cleared while gathering: free it before clear() returns
      error = nullptr;
    }
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace bigbatch::data
