#include "bigbatch/dist/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "bigbatch/core/check.h"

extern char** environ;

namespace bigbatch::dist {

namespace {

using Clock = std::chrono::steady_clock;

/// The signal the launcher was asked to stop with (0: none yet), and the ranks to pass it to.
std::atomic<int> received_signal{0};
std::vector<pid_t>* running_ranks = nullptr;

void forward_signal(int signal_number) {
  received_signal.store(signal_number);
  if (running_ranks == nullptr)
    return;
  for (const pid_t pid : *running_ranks) {
    if (pid > 0)
      kill(pid, signal_number);
  }
}

/// Passes SIGINT and SIGTERM on to the ranks while it lives.
class ForwardSignals {
 public:
  explicit ForwardSignals(std::vector<pid_t>& pids) {
    running_ranks = &pids;
    received_signal.store(0);
    struct sigaction action {};
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~ForwardSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
    running_ranks = nullptr;
  }
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

/// "NAME=value" strings of this process's environment with the rank's variables set.
std::vector<std::string> rank_environment(int64_t rank, int64_t nproc, int64_t port) {
  const std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(nproc)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)}};
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string item = *entry;
    bool replaced = false;
    for (const auto& [name, value] : set)
      replaced = replaced || item.rfind(name + "=", 0) == 0;
    if (!replaced)
      env.push_back(item);
  }
  for (const auto& [name, value] : set)
    env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& text : strings)
    pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

/// Whether the process is stopped (SIGSTOP): state T in /proc/<pid>/stat.
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return cat("exited with code ", WEXITSTATUS(status));
}

int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

int64_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  BB_CHECK(fd >= 0, "socket(): ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!ok)
    throw std::runtime_error(
        cat("could not find a free port on 127.0.0.1: ", std::strerror(errno)));
  return ntohs(address.sin_port);
}

namespace {

/// Forks and execs the ranks of `options.command()`, each with its environment; fills `pids`.
void start_ranks(const LaunchOptions& options, int64_t port, std::vector<pid_t>& pids) {
  const int64_t nproc = options.nproc();
  for (int64_t rank = 0; rank < nproc; ++rank) {
    std::vector<std::string> env = rank_environment(rank, nproc, port);
    std::vector<std::string> argv = options.command();
    std::vector<char*> env_pointers = pointers_to(env);
    std::vector<char*> argv_pointers = pointers_to(argv);
    const pid_t pid = fork();
    if (pid < 0)
      throw std::runtime_error(cat("could not start rank ", rank, ": fork(): ", strerror(errno)));
    if (pid == 0) {
      setpgid(0, 0);                     // a terminal's Ctrl-C reaches the launcher only
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphaned ranks if the launcher is killed
      execve(argv_pointers[0], argv_pointers.data(), env_pointers.data());
      _exit(127);
    }
    pids[rank] = pid;
  }
}

/// Waits for the ranks in `pids`. After the first rank fails, the others get `grace_seconds`
/// before they are killed (a stopped one at once). Returns the job's exit code: the first
/// failure's, or 128 + a signal the launcher passed on, or 0.
int watch_ranks(std::vector<pid_t>& pids, double grace_seconds, std::ostream& err) {
  const int64_t nproc = static_cast<int64_t>(pids.size());
  int result = 0;
  int64_t first_failed = -1;
  Clock::time_point failed_at;
  int64_t running = nproc;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR)
      break;
    if (pid <= 0) {
      if (first_failed >= 0) {
        const bool grace_over =
            std::chrono::duration<double>(Clock::now() - failed_at).count() > grace_seconds;
        for (const pid_t other : pids) {
          if (other > 0 && (grace_over || is_stopped(other)))
            kill(other, SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const int64_t rank = std::find(pids.begin(), pids.end(), pid) - pids.begin();
    if (rank == nproc)
      continue;
    pids[rank] = -1;
    --running;
    const int code = exit_code_of(status);
    const bool stopped_on_request =
        received_signal.load() != 0 && code == 128 + received_signal.load();
    if (code == 0 || stopped_on_request) {
      if (stopped_on_request && result == 0)
        result = code;
      continue;
    }
    err << "bigbatch: rank " << rank << " (pid " << pid << ") " << describe_status(status);
    if (first_failed < 0) {
      first_failed = rank;
      failed_at = Clock::now();
      result = code;
      err << "; stopping the job (" << running << " rank" << (running == 1 ? "" : "s")
          << " left, killed if still running in " << grace_seconds << " s)";
    }
    err << "\n" << std::flush;
  }
  return result;
}

}  // namespace

int launch_local_workers(const LaunchOptions& options, std::ostream& err) {
  const int64_t nproc = options.nproc();
  BB_CHECK_INPUT(nproc >= 2, "--nproc ", nproc, " must be at least 2 to launch a job");
  BB_CHECK(!options.command().empty(), "no command to launch");
  const int64_t port = options.master_port() > 0 ? options.master_port() : free_port();
  std::vector<pid_t> pids(nproc, -1);
  const ForwardSignals forward(pids);
  start_ranks(options, port, pids);
  return watch_ranks(pids, options.grace_seconds(), err);
}

}  // namespace bigbatch::dist
