// Ranks of a job as threads of the test process, connected over Gloo on loopback.
#pragma once

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "bigbatch/dist/launcher.h"
#include "bigbatch/dist/process_group.h"

namespace bigbatch::testing {

/// Options of a loopback job of `world_size` ranks on a free port.
inline dist::ProcessGroupOptions loopback_rank(int64_t rank, int64_t world_size, int64_t port,
                                               double timeout_seconds) {
  dist::WorkerEnvironment worker;
  worker.rank = rank;
  worker.world_size = world_size;
  worker.local_rank = rank;
  worker.local_world_size = world_size;
  worker.master_addr = "127.0.0.1";
  worker.master_port = port;
  return dist::ProcessGroupOptions().worker(worker).timeout_seconds(timeout_seconds);
}

/// Runs `body(communicator)` for every rank of a `world_size` job, each on its own thread with
/// its own connection, and waits for all; the first exception of any rank is rethrown. Ranks are
/// threads, so they share the process's random generator: give them models without dropout.
inline void run_ranks(int64_t world_size,
                      const std::function<void(dist::Communicator& communicator)>& body,
                      double timeout_seconds = 60.0) {
  const int64_t port = dist::free_port();
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const std::unique_ptr<dist::Communicator> communicator =
            dist::connect(loopback_rank(rank, world_size, port, timeout_seconds));
        body(*communicator);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error)
      std::rethrow_exception(error);
  }
}

}  // namespace bigbatch::testing
