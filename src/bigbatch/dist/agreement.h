// Values the ranks of a data-parallel job agree on before training.
#pragma once

#include <cstdint>

#include "bigbatch/dist/communicator.h"

namespace bigbatch::dist {

/// The micro-batch every rank can hold: the smallest that any rank's search found (this rank's
/// `micro_batch` without a communicator).
int64_t agree_on_micro_batch(Communicator* communicator, int64_t micro_batch);

}  // namespace bigbatch::dist
