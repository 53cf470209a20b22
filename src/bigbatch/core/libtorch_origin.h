// Where the LibTorch bigbatch was built against came from, for `bigbatch doctor`.
#pragma once

#include <string>

namespace bigbatch {

/// "the PyTorch wheel at <dir>", "Debian's package (libtorch-dev)" or the install prefix; set by
/// CMake from the LibTorch it found.
std::string libtorch_origin();

}  // namespace bigbatch
