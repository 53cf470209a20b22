// `bigbatch doctor`: what this machine and this build give bigbatch, and what to fix.
#pragma once

#include <ostream>
#include <string>

namespace bigbatch::cli {

/// What the command line gave `bigbatch doctor`.
struct DoctorOptions {
  std::string run_dir = "runs";  ///< the run directory to check (train's default parent)
  double matmul_seconds = 1.0;   ///< time spent measuring each matmul precision
};

/// Prints a table of findings (LibTorch and its build options, CUDA and why not, threads, the
/// BLAS in use and measured fp32/bf16 GFLOP/s, bf16 support of the CPU, memory, the built-in data
/// sets, the run directory), LibTorch's build configuration (at::show_config()), then every
/// problem with its fix. Returns 0 when no problem was found, 1 otherwise.
int run_doctor(const DoctorOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
