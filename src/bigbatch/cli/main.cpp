// The bigbatch command-line tool.
#include <iostream>

#include "bigbatch/cli/app.h"

int main(int argc, char** argv) {
  return bigbatch::cli::run_app(argc, argv, std::cout, std::cerr);
}
