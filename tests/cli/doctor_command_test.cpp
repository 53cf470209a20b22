// `bigbatch doctor` on this machine, as a user runs it.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

// The build machine has what scripts/setup installs: Debian's CPU-only LibTorch on OpenBLAS,
// fortunes and Fashion-MNIST.
TEST(DoctorCommand, NamesTheRealBlasAndACpuOnlyLibTorch) {
  const testing::TempDir dir;
  const Result r = run("doctor --run-dir '" + (dir.path() / "runs").string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected :
       {"libtorch", "CPU-only build (no CUDA)", "not available: this LibTorch is a CPU-only build",
        "OpenBLAS (pthread)", "openblas-pthread/libblas.so.3", "matmul fp32", "matmul bf16",
        "GFLOP/s", "avx512_bf16", "memory", "GiB total", "data fortunes", "data fashion-mnist",
        "will be created in",
        "LibTorch build configuration (at::show_config()):", "no problems found"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("PROBLEM"), std::string::npos) << r.output;
}

TEST(DoctorCommand, AProblemComesWithItsFixAndExitCode1) {
  const testing::TempDir dir;
  const std::string file = dir.write("not-a-dir", "x").string();
  const Result r = run("doctor --run-dir '" + file + "/runs'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("PROBLEM: cannot be created: " + file + " is not a directory"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 problem found:\n- run_dir: " + file + "/runs, cannot be created"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  fix: choose a writable directory: --run-dir DIR or train.run_dir"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace bigbatch
