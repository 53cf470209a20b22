// The bigbatch command-line tool.
#include <iostream>

#include "bigbatch/cli/app.h"
#include "bigbatch/core/malloc_tuning.h"
#include "bigbatch/core/openblas_kernels.h"

int main(int argc, char** argv) {
  // Before anything runs on OpenBLAS: where it chose kernels without AVX2 on a CPU with better
  // ones, start again with OPENBLAS_CORETYPE set (a user's value is kept).
  bigbatch::fit_openblas_kernels(argv);
  // Before the first tensor: where glibc serves malloc (a build without mimalloc), keep freed
  // tensor memory for the next micro-batch (a user's malloc settings are kept).
  bigbatch::tune_malloc_for_training();
  return bigbatch::cli::run_app(argc, argv, std::cout, std::cerr);
}
