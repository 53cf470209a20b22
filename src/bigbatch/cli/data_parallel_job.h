// `bigbatch train` as one rank of a data-parallel job, or as the launcher of one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>

#include "bigbatch/cli/train_command.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/dist/communicator.h"
#include "bigbatch/dist/process_group.h"
#include "bigbatch/dist/worker_environment.h"

namespace bigbatch::cli {

/// The job's communicator when this process is one of several ranks (WORLD_SIZE > 1 in
/// `worker`), connected with the config's dist.timeout and dist.backend; null otherwise.
std::unique_ptr<dist::Communicator> join_job(const std::optional<dist::WorkerEnvironment>& worker,
                                             const TrainConfig& config);

/// The micro-batch every rank can hold: the smallest that any rank's search found (this rank's
/// `micro_batch` without a communicator).
int64_t agree_on_micro_batch(dist::Communicator* communicator, int64_t micro_batch);

/// `bigbatch train --nproc N`: checks the config and the batch split once, then starts N ranks
/// of this program with the same arguments and watches them (dist::launch_local_workers).
/// Returns the launcher's exit code; throws InputError for bad input, before any rank starts.
int launch_train(const TrainCommandOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
