#include "bigbatch/dist/worker_environment.h"

#include <cstdlib>

#include "bigbatch/core/check.h"

namespace bigbatch::dist {

namespace {

/// The integer value of `name`; throws InputError when it is not one.
int64_t integer_variable(const std::string& name, const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  BB_CHECK_INPUT(used == text.size() && !text.empty(), "environment variable ", name, "=\"", text,
                 "\" is not an integer");
  return value;
}

}  // namespace

std::optional<WorkerEnvironment> read_worker_environment(const EnvironmentLookup& lookup) {
  const std::optional<std::string> world_size = lookup("WORLD_SIZE");
  if (!world_size)
    return std::nullopt;
  WorkerEnvironment env;
  env.world_size = integer_variable("WORLD_SIZE", *world_size);
  BB_CHECK_INPUT(env.world_size >= 1, "environment variable WORLD_SIZE=", env.world_size,
                 " must be at least 1");
  const std::optional<std::string> rank = lookup("RANK");
  BB_CHECK_INPUT(rank || env.world_size == 1, "WORLD_SIZE=", env.world_size,
                 " is set but RANK is not; a worker needs both (torchrun sets them)");
  env.rank = rank ? integer_variable("RANK", *rank) : 0;
  BB_CHECK_INPUT(env.rank >= 0 && env.rank < env.world_size, "environment variable RANK=", env.rank,
                 " must lie in [0, WORLD_SIZE) = [0, ", env.world_size, ")");
  const std::optional<std::string> local_world_size = lookup("LOCAL_WORLD_SIZE");
  env.local_world_size =
      local_world_size ? integer_variable("LOCAL_WORLD_SIZE", *local_world_size) : env.world_size;
  BB_CHECK_INPUT(env.local_world_size >= 1 && env.local_world_size <= env.world_size,
                 "environment variable LOCAL_WORLD_SIZE=", env.local_world_size,
                 " must lie in [1, WORLD_SIZE = ", env.world_size, "]");
  const std::optional<std::string> local_rank = lookup("LOCAL_RANK");
  env.local_rank =
      local_rank ? integer_variable("LOCAL_RANK", *local_rank) : env.rank % env.local_world_size;
  BB_CHECK_INPUT(env.local_rank >= 0 && env.local_rank < env.local_world_size,
                 "environment variable LOCAL_RANK=", env.local_rank,
                 " must lie in [0, LOCAL_WORLD_SIZE) = [0, ", env.local_world_size, ")");
  const std::optional<std::string> master_addr = lookup("MASTER_ADDR");
  BB_CHECK_INPUT(master_addr || env.world_size == 1, "WORLD_SIZE=", env.world_size,
                 " is set but MASTER_ADDR is not: every rank needs the address of rank 0");
  BB_CHECK_INPUT(!master_addr || !master_addr->empty(),
                 "environment variable MASTER_ADDR is empty");
  if (master_addr)
    env.master_addr = *master_addr;
  const std::optional<std::string> master_port = lookup("MASTER_PORT");
  if (master_port)
    env.master_port = integer_variable("MASTER_PORT", *master_port);
  BB_CHECK_INPUT(env.master_port >= 1 && env.master_port <= 65535,
                 "environment variable MASTER_PORT=", env.master_port, " must lie in [1, 65535]");
  return env;
}

std::optional<WorkerEnvironment> read_worker_environment() {
  return read_worker_environment([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr)
      return std::nullopt;
    return std::string(value);
  });
}

}  // namespace bigbatch::dist
