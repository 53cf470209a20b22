#include "bigbatch/core/libtorch_origin.h"

namespace bigbatch {

std::string libtorch_origin() {
  return BIGBATCH_LIBTORCH_ORIGIN;  // CMakeLists.txt defines it for this file only
}

}  // namespace bigbatch
