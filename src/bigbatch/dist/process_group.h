// Connecting the ranks of a job over c10d: a TCPStore for rendezvous, Gloo (CPU) or NCCL (CUDA
// builds) for the collectives, and a heartbeat that names the rank at fault when one fails.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/dist/communicator.h"
#include "bigbatch/dist/worker_environment.h"

namespace bigbatch::dist {

/// The collective library.
enum class Backend {
  kGloo,  ///< CPU tensors, TCP between the ranks
  kNccl,  ///< CUDA tensors; only in builds with BIGBATCH_WITH_NCCL
};

/// Parses "gloo" | "nccl" | "auto" (NCCL in builds that have it and when `cuda` is true, else
/// Gloo); throws InputError naming `field` otherwise, or for "nccl" in a build without NCCL.
Backend parse_backend(const std::string& text, bool cuda, const std::string& field);

/// The version of the NCCL library LibTorch uses ("2.27.3"); "" in a build without NCCL.
std::string nccl_version();
/// The config spelling.
std::string to_string(Backend backend);

/// An environment variable read by LibTorch, and whether bigbatch set it.
struct EnvironmentSetting {
  std::string name;
  std::string value;         ///< the value in effect
  bool already_set = false;  ///< it was set before (by the user or an earlier call); left as it was
};

/// Makes ProcessGroupNCCL report a failed or timed-out collective to its caller, so that the
/// rank at fault can be named, instead of its watchdog ending the process first:
/// TORCH_NCCL_BLOCKING_WAIT=1 (wait() blocks, and throws after the timeout) and
/// TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (on an error the watchdog aborts the communicators but does
/// not tear the process down; LibTorch 2.x's default, 3, kills it). A variable that is already
/// set is left as it is. Call before the process group is made; returns both settings.
std::vector<EnvironmentSetting> prepare_nccl_error_handling();

/// How to reach the other ranks.
struct ProcessGroupOptions {
  /// This process's rank, its machine-local rank and the job's ranks.
  TORCH_ARG(WorkerEnvironment, worker);
  /// Every collective, and the connection at the start, fails with DistError after this many
  /// seconds without progress (a rank that died or hangs).
  TORCH_ARG(double, timeout_seconds) = 300.0;
  TORCH_ARG(Backend, backend) = Backend::kGloo;
  /// Seconds between heartbeats, by which a failure names the rank that stopped.
  TORCH_ARG(double, heartbeat_seconds) = 0.5;
};

/// Connects this rank to the others: rank 0 hosts a c10d TCPStore at master_addr:master_port
/// (every rank connects to it), then the process group forms. Blocks until all world_size
/// ranks have joined; throws DistError naming the address and what was missing after
/// timeout_seconds (a rank that never started, a port in use, an unreachable host). After a
/// failure the communicator is left as it is (its threads may be stuck in a dead peer's socket)
/// and the process should exit.
std::unique_ptr<Communicator> connect(const ProcessGroupOptions& options);

}  // namespace bigbatch::dist
