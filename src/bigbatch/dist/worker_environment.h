// A worker's place in a data-parallel job, from the environment variables torchrun sets.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace bigbatch::dist {

/// Where this process sits in a job: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
/// and MASTER_PORT, as torchrun (and `bigbatch train --nproc`) set them.
struct WorkerEnvironment {
  int64_t rank = 0;                       ///< RANK: this process in [0, world_size)
  int64_t world_size = 1;                 ///< WORLD_SIZE: processes in the job, over all machines
  int64_t local_rank = 0;                 ///< LOCAL_RANK: this process among those on its machine
  int64_t local_world_size = 1;           ///< LOCAL_WORLD_SIZE: processes on this machine
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR: host of rank 0 (the store)
  int64_t master_port = 29500;            ///< MASTER_PORT: its port
};

/// Reads a variable; empty when it is not set.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// The worker environment, or empty when WORLD_SIZE is not set (a single process). Throws
/// InputError naming the variable for a value that is not a number, out of range or
/// inconsistent: RANK missing or not in [0, WORLD_SIZE), LOCAL_RANK not below LOCAL_WORLD_SIZE,
/// MASTER_PORT outside [1, 65535], MASTER_ADDR missing when WORLD_SIZE > 1. LOCAL_RANK and
/// LOCAL_WORLD_SIZE default to RANK and WORLD_SIZE (one machine).
std::optional<WorkerEnvironment> read_worker_environment(const EnvironmentLookup& lookup);
/// The same from the process environment (getenv).
std::optional<WorkerEnvironment> read_worker_environment();

}  // namespace bigbatch::dist
