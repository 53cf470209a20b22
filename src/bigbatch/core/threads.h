// Thread settings of the two pools that run LibTorch's CPU kernels: OpenMP (intra-op, also
// oneDNN's) and OpenBLAS's own pthreads. On a small machine both at full width oversubscribe the
// cores, so a run chooses them per matmul backend and reports them.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace bigbatch {

/// Which library runs the run's big matmuls, which decides the automatic thread settings.
enum class MatmulBackend {
  kBlas,    ///< float32/float64 Linear and mm: OpenBLAS with its own threads, or MKL on OpenMP's
  kOneDnn,  ///< bfloat16 (autocast), or float32 with model.fp32_matmul: oneDNN, on the OpenMP
            ///< threads
};

/// What the user asked for; 0 means automatic.
struct ThreadRequest {
  /// The matmul backend of the run.
  TORCH_ARG(MatmulBackend, backend) = MatmulBackend::kBlas;
  /// OpenMP intra-op threads (torch::set_num_threads); 0 = automatic.
  TORCH_ARG(int64_t, openmp) = 0;
  /// OpenBLAS threads; 0 = automatic. Ignored where OpenBLAS is not the BLAS.
  TORCH_ARG(int64_t, blas) = 0;
  /// Processes sharing this machine's cores (the data-parallel ranks on it): the automatic
  /// settings give each cores / processes of them (at least 1).
  TORCH_ARG(int64_t, processes) = 1;
};

/// The settings in effect.
struct ThreadSettings {
  int openmp = 1;  ///< OpenMP intra-op threads
  int blas = 0;    ///< OpenBLAS threads; 0 when OpenBLAS is not LibTorch's BLAS
  MatmulBackend backend = MatmulBackend::kBlas;

  /// "OpenMP 2, OpenBLAS 1 (matmuls: oneDNN)" or "OpenMP 1, OpenBLAS 2 (fp32: OpenBLAS)"; without
  /// OpenBLAS (MKL in the PyTorch wheel) "OpenMP 2 (fp32: the BLAS on the OpenMP threads)".
  std::string describe() const;
};

/// The automatic choice for `cores` cores, measured on a 2-core machine (docs/BENCHMARKS.md,
/// "Threads"; docs/PRECISION.md):
/// kBlas: OpenMP 1, OpenBLAS = cores (OpenBLAS does the work; OpenMP threads would compete);
/// kOneDnn: OpenMP = cores, OpenBLAS 1 (oneDNN does the work on the OpenMP threads).
/// Without OpenBLAS (`openblas` false: MKL, which runs on the OpenMP threads) OpenMP = cores for
/// both and blas 0. Non-zero fields of `request` are kept as given.
ThreadSettings choose_threads(const ThreadRequest& request, int cores, bool openblas = true);

/// The settings apply_threads(request) would apply, applying nothing.
ThreadSettings planned_threads(const ThreadRequest& request);
/// Chooses the settings for this machine's cores and LibTorch's BLAS and applies them:
/// torch::set_num_threads and, when the BLAS is OpenBLAS (found at run time),
/// openblas_set_num_threads. Returns the
/// settings now in effect. Throws InputError for negative requests.
ThreadSettings apply_threads(const ThreadRequest& request);

/// Makes ATen's operations on the calling thread run on one OpenMP thread, leaving the process's
/// setting (and every other thread's) as it is. For a helper thread next to the training thread:
/// its first parallel operation would otherwise start a team of torch::get_num_threads() OpenMP
/// threads of its own, and two teams spinning at their barriers on the same cores slow both down
/// (measured on the prefetcher: docs/BENCHMARKS.md, "What changed on 2026-12-01 (afternoon)",
/// 4a). Without OpenMP in the process it changes nothing.
void use_one_intra_op_thread_on_this_thread();

/// The same with `threads` (>= 1) OpenMP threads on the calling thread, and as many MKL threads
/// for its products where MKL is LibTorch's BLAS: a helper that runs its own share of the cores
/// (engine::ConcurrentMicroBatches on several cores per pass).
void use_intra_op_threads_on_this_thread(int threads);

/// use_intra_op_threads_on_this_thread(threads) for a scope, then the calling thread's count
/// before it again. Usage: `{ IntraOpThreadsOnThisThread all(4); evaluate(); }`
class IntraOpThreadsOnThisThread {
 public:
  explicit IntraOpThreadsOnThisThread(int threads);
  ~IntraOpThreadsOnThisThread();
  IntraOpThreadsOnThisThread(const IntraOpThreadsOnThisThread&) = delete;
  IntraOpThreadsOnThisThread& operator=(const IntraOpThreadsOnThisThread&) = delete;

 private:
  int openmp_before_;
  int mkl_before_ = 0;
};
/// OpenBLAS's current thread count; 0 when OpenBLAS is not loaded in this process.
int blas_threads();

/// Logical cores available to this process (at least 1).
int available_cores();

}  // namespace bigbatch
