// `bigbatch doctor` on this machine, as a user runs it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/libtorch_origin.h"
#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

bool cpu_has_avx2() {
  return testing::read_file("/proc/cpuinfo").find(" avx2") != std::string::npos;
}

// The build machine has what scripts/setup installs: the PyTorch wheel's CUDA LibTorch on MKL
// (or, in the Debian configuration, Debian's CPU-only LibTorch on OpenBLAS), fortunes and
// Fashion-MNIST.
TEST(DoctorCommand, NamesTheLibTorchAndTheRealBlas) {
  const testing::TempDir dir;
  const Result r = run("doctor --run-dir '" + (dir.path() / "runs").string() + "'");
  std::vector<std::string> expected = {"libtorch",
                                       cat(TORCH_VERSION, " from ", libtorch_origin()),
                                       "matmul fp32",
                                       "matmul bf16",
                                       "GFLOP/s",
                                       "avx512_bf16",
                                       "memory",
                                       "GiB total",
                                       "data fortunes",
                                       "data fashion-mnist",
                                       "will be created in",
                                       "LibTorch build configuration (at::show_config()):"};
#ifdef BIGBATCH_WITH_CUDA
  expected.push_back("built with CUDA");
#else
  expected.push_back("CPU-only build (no CUDA)");
  expected.push_back("not available: this LibTorch is a CPU-only build");
#endif
  if (at::hasMKL()) {  // the wheel
    expected.push_back("MKL");
    expected.push_back("libtorch_cpu.so (linked into LibTorch, on the OpenMP threads)");
    expected.push_back("training sets fp32: OpenMP ");
  } else {
    expected.push_back("OpenBLAS (pthread, ");
    expected.push_back(" kernels)");
    expected.push_back("openblas-pthread/libblas.so.3");
  }
  for (const std::string& text : expected)
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  // Virtual machines often hide the CPU model from OpenBLAS (a problem the doctor reports);
  // whatever it finds, the exit code says whether it found a problem, and each has a fix.
  const size_t problems = r.output.find(" found:\n");
  EXPECT_EQ(r.exit_code, problems == std::string::npos ? 0 : 1) << r.output;
  EXPECT_EQ(r.output.find("PROBLEM") == std::string::npos, problems == std::string::npos);
  if (problems != std::string::npos) {
    EXPECT_NE(r.output.find("  fix: ", problems), std::string::npos) << r.output;
  }
}

/// The doctor's "malloc" row, from the report's table.
std::string malloc_row(const std::string& report) {
  const size_t start = report.find("\nmalloc ");
  return start == std::string::npos
             ? ""
             : report.substr(start + 1, report.find('\n', start + 1) - start - 1);
}

// The bigbatch executable links mimalloc (BIGBATCH_MIMALLOC, the default), whose malloc then
// serves LibTorch too: a block that libc10 allocates lies in mimalloc's heap. Built without it,
// glibc serves malloc with bigbatch's thresholds, or the user's settings where there are some.
TEST(DoctorCommand, SaysWhichAllocatorServesEveryLibrarysMalloc) {
  const testing::TempDir dir;
  const std::string doctor =
      std::string(BIGBATCH_CLI_PATH) + " doctor --run-dir '" + dir.path().string() + "'";
  const Result plain = run_shell(doctor);
  const Result user_set = run_shell("MALLOC_TRIM_THRESHOLD_=0 " + doctor);
  const std::string row = malloc_row(plain.output);
  const std::string user_row = malloc_row(user_set.output);
  ASSERT_FALSE(row.empty()) << plain.output;
  if (BIGBATCH_CLI_MIMALLOC) {
    EXPECT_EQ(row.rfind("malloc              mimalloc 2.", 0), 0u) << row;
    EXPECT_NE(row.find("libmimalloc.so"), std::string::npos) << row;
    EXPECT_NE(row.find("serves every library's malloc (LibTorch's blocks: yes)"), std::string::npos)
        << row;
    EXPECT_EQ(user_row, row);  // glibc's settings do not apply to mimalloc
  } else {
    EXPECT_EQ(row.rfind("malloc              glibc 2.", 0), 0u) << row;
    EXPECT_NE(row.find("bigbatch set M_MMAP_THRESHOLD 32.0 MiB and M_TRIM_THRESHOLD 512.0 MiB"),
              std::string::npos)
        << row;
    EXPECT_NE(user_row.find("your settings kept"), std::string::npos) << user_row;
  }
  EXPECT_EQ(row.find("PROBLEM"), std::string::npos) << row;
}

/// Sets OPENBLAS_CORETYPE=Haswell for the doctor's process while it lives, where the CPU has
/// avx2 (so that OpenBLAS's kernels fit the CPU even where it does not recognise the model).
class FittingOpenBlasKernels {
 public:
  FittingOpenBlasKernels() {
    if (cpu_has_avx2())
      ::setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  }
  ~FittingOpenBlasKernels() { ::unsetenv("OPENBLAS_CORETYPE"); }
  FittingOpenBlasKernels(const FittingOpenBlasKernels&) = delete;
  FittingOpenBlasKernels& operator=(const FittingOpenBlasKernels&) = delete;
};

// With OpenBLAS told which kernels fit, nothing is left to fix on the build machine.
TEST(DoctorCommand, AllWellIsExitCode0) {
  const FittingOpenBlasKernels kernels;
  const testing::TempDir dir;
  const Result r = run("doctor --run-dir '" + dir.path().string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (cpu_has_avx2() && !at::hasMKL()) {  // OpenBLAS (Debian's LibTorch) with the kernels set
    EXPECT_NE(r.output.find("OpenBLAS (pthread, Haswell kernels)"), std::string::npos) << r.output;
  }
  EXPECT_NE(r.output.find("\nno problems found\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("PROBLEM"), std::string::npos) << r.output;
}

TEST(DoctorCommand, AProblemComesWithItsFixAndExitCode1) {
  const FittingOpenBlasKernels kernels;
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
