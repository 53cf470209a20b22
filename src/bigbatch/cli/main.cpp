// The bigbatch command-line tool.
#include <iostream>

#include "bigbatch/cli/app.h"
#include "bigbatch/core/openblas_kernels.h"

int main(int argc, char** argv) {
  // Before anything runs on OpenBLAS: where it chose kernels without AVX2 on a CPU with better
  // ones, start again with OPENBLAS_CORETYPE set (a user's value is kept).
  bigbatch::fit_openblas_kernels(argv);
  return bigbatch::cli::run_app(argc, argv, std::cout, std::cerr);
}
