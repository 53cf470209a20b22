// The doctor's decisions on given facts: CUDA, BLAS, memory, data sets, the run directory.
#include "bigbatch/cli/doctor_checks.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "support/test_support.h"

namespace bigbatch {
namespace {

using cli::CudaFacts;
using cli::Finding;

TEST(DoctorChecks, CudaSaysWhyNot) {
  CudaFacts cpu_build;
  Finding f = cli::diagnose_cuda(cpu_build);
  EXPECT_FALSE(f.problem);
  EXPECT_EQ(f.value, "not available: this LibTorch is a CPU-only build");
  EXPECT_NE(f.detail.find("no NVIDIA GPU"), std::string::npos);

  cpu_build.nvidia_gpu_present = true;  // a GPU that a CPU-only build cannot use
  f = cli::diagnose_cuda(cpu_build);
  EXPECT_TRUE(f.problem);
  EXPECT_NE(f.fix.find("cmake_prefix_path"), std::string::npos) << f.fix;

  CudaFacts no_driver;
  no_driver.built_with_cuda = true;
  no_driver.nvidia_gpu_present = true;
  f = cli::diagnose_cuda(no_driver);
  EXPECT_TRUE(f.problem);
  EXPECT_EQ(f.value, "not available: no NVIDIA driver");
  EXPECT_NE(f.fix.find("nvidia-driver"), std::string::npos);

  CudaFacts no_device = no_driver;
  no_device.driver_loaded = true;
  no_device.driver_version = "NVRM version: 535.54";
  f = cli::diagnose_cuda(no_device);
  EXPECT_TRUE(f.problem);
  EXPECT_EQ(f.value, "not available: no device");
  EXPECT_NE(f.detail.find("535.54"), std::string::npos);

  CudaFacts available = no_device;
  available.device_count = 2;
  f = cli::diagnose_cuda(available);
  EXPECT_FALSE(f.problem);
  EXPECT_EQ(f.value, "available, 2 device(s)");
}

TEST(DoctorChecks, GpusTheirCapabilitiesAndTheCudaLibraries) {
  cli::GpuReport report;
  EXPECT_TRUE(cli::gpu_findings(report).empty());  // a CPU-only build says nothing more
  report.built_with_cuda = true;
  report.runtime_version = "13.2";
  report.gpus.push_back({"NVIDIA H200", int64_t{150} << 30, 9, 0, true, true});
  report.gpus.push_back({"Tesla V100-SXM2-16GB", int64_t{16} << 30, 7, 0, false, true});
  std::vector<Finding> f = cli::gpu_findings(report);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].topic, "gpu 0");
  EXPECT_EQ(f[0].value, "NVIDIA H200, 150.0 GiB");
  EXPECT_EQ(f[0].detail, "compute capability 9.0; bf16 yes, fp16 yes");
  EXPECT_EQ(f[1].detail, "compute capability 7.0; bf16 no (fp16 or fp32 instead), fp16 yes");
  EXPECT_EQ(f[2].topic, "cuda versions");
  EXPECT_EQ(f[2].value, "runtime 13.2, driver none");
  EXPECT_EQ(f[3].value, "not in this build");
  report.driver_version = "13.0";
  report.nccl_version = "2.27.3";
  f = cli::gpu_findings(report);
  EXPECT_EQ(f[2].value, "runtime 13.2, driver 13.0");
  EXPECT_EQ(f[3].value, "2.27.3");
  // This build's own report: the runtime's version exactly when CUDA is compiled in.
  const cli::GpuReport here = cli::gpu_report();
  EXPECT_EQ(here.built_with_cuda, !here.runtime_version.empty());
}

TEST(DoctorChecks, ReferenceBlasIsAProblemWithItsFix) {
  BlasLibrary reference;
  reference.kind = BlasKind::kReference;
  reference.path = "/lib/x86_64-linux-gnu/libblas.so.3";
  reference.resolved = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  Finding f = cli::diagnose_blas(reference, "", {"avx2"});
  EXPECT_TRUE(f.problem);
  EXPECT_EQ(f.value, "reference BLAS");
  EXPECT_EQ(f.fix, "apt install libopenblas0-pthread");
  f = cli::diagnose_blas(reference, "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                         {"avx2"});
  EXPECT_EQ(f.fix,
            "select OpenBLAS: update-alternatives --set libblas.so.3-x86_64-linux-gnu "
            "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3");
}

TEST(DoctorChecks, OpenBlasOnKernelsWithoutAvx2OnAnAvx2CpuIsAProblem) {
  BlasLibrary openblas;
  openblas.kind = BlasKind::kOpenBlas;
  openblas.variant = "pthread";
  openblas.resolved = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3";
  openblas.config = "OpenBLAS 0.3.21 DYNAMIC_ARCH";
  openblas.core = "SkylakeX";
  Finding f = cli::diagnose_blas(openblas, "", {"avx2", "avx512f"});
  EXPECT_FALSE(f.problem);
  EXPECT_EQ(f.value, "OpenBLAS (pthread, SkylakeX kernels)");
  EXPECT_NE(f.detail.find("OpenBLAS 0.3.21"), std::string::npos);

  openblas.core = "Prescott";  // DYNAMIC_ARCH's fallback for a CPU it does not know
  f = cli::diagnose_blas(openblas, "", {"avx2", "avx512f"});
  EXPECT_TRUE(f.problem);
  EXPECT_NE(f.detail.find("did not recognise this CPU"), std::string::npos) << f.detail;
  EXPECT_EQ(f.fix.rfind("export OPENBLAS_CORETYPE=SkylakeX ", 0), 0u) << f.fix;
  f = cli::diagnose_blas(openblas, "", {"avx2"});
  EXPECT_EQ(f.fix.rfind("export OPENBLAS_CORETYPE=Haswell ", 0), 0u) << f.fix;
  EXPECT_FALSE(cli::diagnose_blas(openblas, "", {"sse3"}).problem);  // right for an old CPU
}

TEST(DoctorChecks, MallocNamesTheAllocatorAndWhatBigbatchSet) {
  MallocLibrary mimalloc{MallocKind::kMimalloc, "libmimalloc.so.2",
                         "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2.0", "2.0.9", true};
  Finding f = cli::malloc_finding(mimalloc, MallocTuning::kNotGlibc);
  EXPECT_EQ(f.value, "mimalloc 2.0.9");
  EXPECT_FALSE(f.problem);
  EXPECT_NE(f.detail.find("serves every library's malloc (LibTorch's blocks: yes)"),
            std::string::npos)
      << f.detail;
  mimalloc.serves_libtorch = false;  // two allocators in one process: a block could be freed wrong
  f = cli::malloc_finding(mimalloc, MallocTuning::kNotGlibc);
  EXPECT_TRUE(f.problem);
  EXPECT_NE(f.detail.find("a block LibTorch allocates is not in its heap"), std::string::npos);
  EXPECT_NE(f.fix.find("-DBIGBATCH_MIMALLOC=OFF"), std::string::npos);

  const MallocLibrary glibc{MallocKind::kGlibc, "/lib/x86_64-linux-gnu/libc.so.6",
                            "/usr/lib/x86_64-linux-gnu/libc.so.6", "2.36", std::nullopt};
  f = cli::malloc_finding(glibc, MallocTuning::kSet);
  EXPECT_EQ(f.value, "glibc 2.36");
  EXPECT_NE(f.detail.find("bigbatch set M_MMAP_THRESHOLD 32.0 MiB and M_TRIM_THRESHOLD 512.0 MiB"),
            std::string::npos)
      << f.detail;
  EXPECT_NE(cli::malloc_finding(glibc, MallocTuning::kUserSettings).detail.find("your settings"),
            std::string::npos);
  EXPECT_NE(cli::malloc_finding(glibc, MallocTuning::kNotRun).detail.find("its defaults"),
            std::string::npos);
  EXPECT_FALSE(cli::malloc_finding(glibc, MallocTuning::kRefused).problem);

  const MallocLibrary preloaded{MallocKind::kJemalloc, "/usr/lib/libjemalloc.so.2",
                                "/usr/lib/libjemalloc.so.2", "", std::nullopt};
  f = cli::malloc_finding(preloaded, MallocTuning::kNotGlibc);
  EXPECT_EQ(f.value, "jemalloc");
  EXPECT_NE(f.detail.find("bigbatch sets nothing"), std::string::npos) << f.detail;
}

TEST(DoctorChecks, LittleMemoryIsAProblem) {
  EXPECT_FALSE(cli::memory_finding({8LL << 30, 6LL << 30}).problem);
  const Finding low = cli::memory_finding({8LL << 30, 512LL << 20});
  EXPECT_TRUE(low.problem);
  EXPECT_EQ(low.value, "8.00 GiB total, 512.0 MiB available");
  EXPECT_NE(low.fix.find("memory.budget"), std::string::npos);
}

TEST(DoctorChecks, Bf16SupportIsANote) {
  const Finding native = cli::cpu_bf16_finding({"avx512_bf16"}, "Xeon");
  EXPECT_EQ(native.value, "avx512_bf16 yes, amx_bf16 no");
  EXPECT_FALSE(native.problem);
  const Finding emulated = cli::cpu_bf16_finding({"avx2"}, "");
  EXPECT_FALSE(emulated.problem);
  EXPECT_NE(emulated.detail.find("runs its products on fp32 kernels"), std::string::npos)
      << emulated.detail;
}

TEST(DoctorChecks, MissingDataSetsNameTheirDebianPackages) {
  const testing::TempDir dir;
  cli::DatasetLocations missing;
  missing.fortunes = (dir.path() / "fortunes").string();
  missing.fashion_mnist = (dir.path() / "fashion").string();
  std::vector<Finding> f = cli::dataset_findings(missing);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_TRUE(f[0].problem);
  EXPECT_EQ(f[0].fix, "apt install fortunes");
  EXPECT_TRUE(f[1].problem);
  EXPECT_EQ(f[1].fix, "apt install dataset-fashion-mnist");
  EXPECT_NE(f[1].detail.find("train-images-idx3-ubyte.gz"), std::string::npos) << f[1].detail;

  dir.write("fortunes/zippy", "Yow!\n%\n");
  dir.write("fortunes/zippy.dat", "index");
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    dir.write(std::string("fashion/") + name, "x");
  f = cli::dataset_findings(missing);
  EXPECT_FALSE(f[0].problem);
  EXPECT_EQ(f[0].value, "1 text files");
  EXPECT_FALSE(f[1].problem);
}

TEST(DoctorChecks, RunDirectoryMustBeWritableOrCreatable) {
  const testing::TempDir dir;
  Finding f = cli::run_dir_finding(dir.path().string());
  EXPECT_FALSE(f.problem) << f.detail;
  EXPECT_EQ(f.detail.rfind("writable; ", 0), 0u) << f.detail;
  f = cli::run_dir_finding((dir.path() / "new" / "runs").string());
  EXPECT_FALSE(f.problem) << f.detail;
  EXPECT_EQ(f.detail.rfind("will be created in " + dir.path().string(), 0), 0u) << f.detail;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // nothing left behind

  const std::string file = dir.write("a-file", "x").string();
  f = cli::run_dir_finding(file);
  EXPECT_TRUE(f.problem);
  EXPECT_EQ(f.detail, "exists and is not a directory");
  f = cli::run_dir_finding(file + "/runs");
  EXPECT_TRUE(f.problem);
  EXPECT_EQ(f.detail, "cannot be created: " + file + " is not a directory");
  EXPECT_NE(f.fix.find("--run-dir"), std::string::npos);
}

}  // namespace
}  // namespace bigbatch
