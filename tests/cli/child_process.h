// `bigbatch` started in the background, to be signalled while it runs.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace bigbatch {

/// `bigbatch ARGS` started in the background with its output in a file; the shell splits ARGS.
class Child {
 public:
  Child(const std::string& arguments, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      const std::string command = "exec " + std::string(BIGBATCH_CLI_PATH) + " " + arguments;
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  /// Whether it is still running.
  bool running() {
    if (finished_)
      return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      finished_ = true;
      status_ = status;
    }
    return !finished_;
  }
  void kill(int signal_number) { ::kill(pid_, signal_number); }
  /// Its process id.
  pid_t pid() const { return pid_; }
  /// Waits for it; the exit code, or 128 + the signal that ended it.
  int wait() {
    if (!finished_) {
      ::waitpid(pid_, &status_, 0);
      finished_ = true;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

 private:
  pid_t pid_ = -1;
  bool finished_ = false;
  int status_ = 0;
};

}  // namespace bigbatch
