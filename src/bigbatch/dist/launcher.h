// Starting the ranks of a data-parallel job on this machine and watching them.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace bigbatch::dist {

/// What to start.
struct LaunchOptions {
  /// Ranks to start (>= 2).
  TORCH_ARG(int64_t, nproc) = 2;
  /// The program and its arguments, the same for every rank (argv[0] is the program to run).
  TORCH_ARG(std::vector<std::string>, command);
  /// Port of rank 0's rendezvous store on 127.0.0.1; 0 picks a free one.
  TORCH_ARG(int64_t, master_port) = 0;
  /// After the first rank fails, the others get this long to fail on their own (they should,
  /// within dist.timeout) before they are killed.
  TORCH_ARG(double, grace_seconds) = 60.0;
};

/// A free TCP port on 127.0.0.1 (bound, read, released: another process could take it first).
int64_t free_port();

/// Starts options.nproc copies of options.command, each with the variables torchrun sets
/// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT), in a
/// process group of their own and killed if the launcher dies. SIGINT and SIGTERM received by
/// the launcher are passed to every rank (which then stop together at the next window boundary).
/// When a rank fails (a non-zero exit or a signal), the launcher reports it on `err`, kills any
/// rank that is stopped (SIGSTOP) at once, gives the others grace_seconds to exit, then kills
/// them. Returns 0 when every rank exited with 0, 128 + the signal when the launcher was asked
/// to stop and the ranks stopped cleanly, else the first failing rank's exit code (128 + the
/// signal that killed it). Throws std::runtime_error when a rank cannot be started.
int launch_local_workers(const LaunchOptions& options, std::ostream& err);

}  // namespace bigbatch::dist
