// `bigbatch train --nproc N`: the launcher of a data-parallel job on this machine.
#pragma once

#include <ostream>

#include "bigbatch/cli/train_command.h"

namespace bigbatch::cli {

/// `bigbatch train --nproc N`: checks the config and the batch split once, then starts N ranks
/// of this program with the same arguments and watches them (dist::launch_local_workers).
/// Returns the launcher's exit code; throws InputError for bad input, before any rank starts.
int launch_train(const TrainCommandOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
