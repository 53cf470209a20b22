// The checks of `bigbatch doctor`: each looks at one part of the environment and says what it
// found and, for a problem, how to fix it. The deciding parts take their facts as arguments, so
// tests can give them any machine.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "bigbatch/core/blas_library.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/malloc_library.h"
#include "bigbatch/core/malloc_tuning.h"
#include "bigbatch/core/system_info.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/data/text_corpus.h"

namespace bigbatch::cli {

/// One line of the doctor's report.
struct Finding {
  std::string topic;     ///< "blas", "cuda", ...
  std::string value;     ///< what was found, short
  std::string detail;    ///< more about it
  bool problem = false;  ///< something stands in the way of training well
  std::string fix;       ///< for a problem: what to do
};

/// LibTorch's version and the parts it was built with (OpenMP, oneDNN, MKL, LAPACK, CUDA).
Finding libtorch_finding(const std::string& show_config);

/// What decides whether CUDA can be used.
struct CudaFacts {
  bool built_with_cuda = false;     ///< LibTorch has CUDA support (USE_CUDA in its build)
  int device_count = 0;             ///< devices LibTorch sees
  bool driver_loaded = false;       ///< the NVIDIA kernel driver is loaded
  std::string driver_version;       ///< /proc/driver/nvidia/version's first line
  bool nvidia_gpu_present = false;  ///< an NVIDIA display or 3D controller on the PCI bus
};

/// The facts of this machine and this LibTorch (`show_config`: at::show_config()).
CudaFacts cuda_facts(const std::string& show_config);

/// Whether CUDA is available and, if not, why: a CPU-only LibTorch build, no driver, no device.
/// A problem where a GPU is there but cannot be used.
Finding diagnose_cuda(const CudaFacts& facts);

/// What the doctor reports of the GPUs and the CUDA libraries.
struct GpuReport {
  std::vector<GpuProperties> gpus;  ///< every visible device, by index
  std::string runtime_version;      ///< CUDA runtime, "" without CUDA
  std::string driver_version;       ///< newest CUDA the driver supports, "" without a driver
  std::string nccl_version;         ///< "" in a build without NCCL
  bool built_with_cuda = false;
};

/// The GPUs and CUDA libraries of this build and machine.
GpuReport gpu_report();

/// One line per GPU (name, memory, compute capability, bf16 and fp16 support), then the CUDA
/// runtime and driver versions and the NCCL version; nothing for a build without CUDA.
std::vector<Finding> gpu_findings(const GpuReport& report);

/// OpenMP and OpenBLAS threads as this process started (`at_start`), the cores, the environment
/// variables that set them, and what training chooses per precision.
Finding threads_finding(const ThreadSettings& at_start, int cores);

/// Debian's OpenBLAS alternative beside the BLAS in use (.../openblas-pthread/libblas.so.3) when
/// it is installed; "" otherwise.
std::string openblas_alternative(const BlasLibrary& blas);

/// The BLAS LibTorch calls, with OpenBLAS's threading variant and kernels. Problems: the
/// reference BLAS (fix: install libopenblas0-pthread or, when `alternative` (openblas_alternative)
/// is not empty, select it with update-alternatives), and OpenBLAS running kernels without AVX2
/// on a CPU whose `cpu_flags` have avx2 (fix: OPENBLAS_CORETYPE).
Finding diagnose_blas(const BlasLibrary& blas, const std::string& alternative,
                      const std::set<std::string>& cpu_flags);

/// A timed (n x n) x (n x n) product, fp32 with training's fp32 threads or bf16 with its bf16
/// threads (see measure_matmul). Never a problem: the BLAS and CPU findings say why it is slow.
Finding matmul_finding(torch::Dtype dtype, double seconds);

/// The same fp32 product on oneDNN's float32 kernels (nn::onednn_mm), which model.fp32_matmul =
/// "onednn" uses, with its "auto" choice; a note that they are unavailable where
/// nn::onednn_fp32_available() is false. Never a problem.
Finding onednn_matmul_finding(double seconds);

/// Native bf16 support of the CPU (avx512_bf16, amx_bf16); without it model.precision = "bf16"
/// runs its products on fp32 kernels (nn/bf16_matmul) (a note, not a problem).
Finding cpu_bf16_finding(const std::set<std::string>& flags, const std::string& model);

/// The allocator that serves malloc and what bigbatch set for it (`tuning`). A problem where
/// mimalloc is loaded but a block LibTorch allocates is not in its heap.
Finding malloc_finding(const MallocLibrary& allocator, MallocTuning tuning);

/// Total and available memory; under 1 GiB available is a problem.
Finding memory_finding(const MemoryInfo& memory);

/// Where the built-in data sets are looked for.
struct DatasetLocations {
  std::string fortunes = data::kFortunesDirectory;  ///< Debian's `fortunes`
  std::string fashion_mnist;  ///< Debian's `dataset-fashion-mnist`; empty: its default place
};

/// Whether the fortunes corpus (text files) and the four Fashion-MNIST files are there; a missing
/// one is a problem whose fix installs its Debian package.
std::vector<Finding> dataset_findings(const DatasetLocations& locations);

/// Whether `run_dir` is, or can be created as, a writable directory with at least 256 MiB free.
/// An existing directory is tested by creating and removing a file in it; nothing is created.
Finding run_dir_finding(const std::string& run_dir);

}  // namespace bigbatch::cli
