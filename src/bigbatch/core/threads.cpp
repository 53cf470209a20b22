#include "bigbatch/core/threads.h"

#include <algorithm>
#include <thread>

#include "bigbatch/core/check.h"
#include "bigbatch/core/loaded_library.h"

namespace bigbatch {
namespace {

// OpenBLAS is LibTorch's BLAS in Debian's package but not in every build (MKL, Accelerate), so
// its thread functions are looked up at run time instead of linked.
using SetThreads = void (*)(int);
using GetThreads = int (*)();

SetThreads openblas_set() {
  return loaded_function<SetThreads>("openblas_set_num_threads");
}

GetThreads openblas_get() {
  return loaded_function<GetThreads>("openblas_get_num_threads");
}

// MKL (linked into the PyTorch wheel's LibTorch) keeps its own thread count, which
// torch::set_num_threads sets for the whole process; MKL_Set_Num_Threads_Local (the C function;
// the lower-case mkl_set_num_threads_local is Fortran's, taking a pointer) overrides it for the
// calling thread (0: back to the process's) and returns the thread's setting before.
using SetLocalThreads = int (*)(int);

SetLocalThreads mkl_set_local() {
  return loaded_function<SetLocalThreads>("MKL_Set_Num_Threads_Local");
}

/// Sets the calling thread's OpenMP threads (>= 1).
void set_openmp_threads_of_this_thread(int threads) {
  BB_CHECK(threads >= 1, "use_intra_op_threads_on_this_thread(", threads, "): need >= 1");
  // LibTorch sets a thread's OpenMP thread count from the process-wide one the first time the
  // thread asks for it (at::get_num_threads, at::parallel_for); have that happen now, then lower
  // this thread's own count (OpenMP's nthreads setting belongs to the calling thread). Called
  // in LibTorch, not through an inline header function, whose once-per-thread flag would be
  // this binary's copy. omp_set_num_threads is looked up at run time like OpenBLAS's functions.
  (void)at::get_num_threads();
  if (const auto set = loaded_function<SetThreads>("omp_set_num_threads"))
    set(threads);
}

/// Sets MKL's threads for the calling thread (0: the process's); returns its setting before (0
/// when there was none, or without MKL).
int set_mkl_threads_of_this_thread(int threads) {
  const SetLocalThreads set_mkl = mkl_set_local();
  return set_mkl != nullptr ? set_mkl(threads) : 0;
}

}  // namespace

std::string ThreadSettings::describe() const {
  const bool onednn = backend == MatmulBackend::kOneDnn;
  if (blas == 0)
    return cat("OpenMP ", openmp,
               onednn ? " (matmuls: oneDNN)" : " (fp32: the BLAS on the OpenMP threads)");
  return cat("OpenMP ", openmp, ", OpenBLAS ", blas,
             onednn ? " (matmuls: oneDNN)" : " (fp32: OpenBLAS)");
}

void use_one_intra_op_thread_on_this_thread() {
  use_intra_op_threads_on_this_thread(1);
}

void use_intra_op_threads_on_this_thread(int threads) {
  set_openmp_threads_of_this_thread(threads);
  (void)set_mkl_threads_of_this_thread(threads);
}

IntraOpThreadsOnThisThread::IntraOpThreadsOnThisThread(int threads)
    : openmp_before_(at::get_num_threads()) {
  set_openmp_threads_of_this_thread(threads);
  mkl_before_ = set_mkl_threads_of_this_thread(threads);
}

IntraOpThreadsOnThisThread::~IntraOpThreadsOnThisThread() {
  set_openmp_threads_of_this_thread(openmp_before_);
  (void)set_mkl_threads_of_this_thread(mkl_before_);
}

int available_cores() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int blas_threads() {
  const GetThreads get = openblas_get();
  return get != nullptr ? get() : 0;
}

ThreadSettings choose_threads(const ThreadRequest& request, int cores, bool openblas) {
  BB_CHECK_INPUT(request.openmp() >= 0, "ThreadRequest.openmp = ", request.openmp(),
                 " must be >= 0");
  BB_CHECK_INPUT(request.blas() >= 0, "ThreadRequest.blas = ", request.blas(), " must be >= 0");
  const bool onednn = request.backend() == MatmulBackend::kOneDnn;
  ThreadSettings settings;
  settings.backend = request.backend();
  // Automatic: the cores go to the pool that runs the big matmuls.
  const bool blas_pool = openblas && !onednn;
  settings.openmp = request.openmp() > 0 ? static_cast<int>(request.openmp())
                    : blas_pool          ? 1
                                         : cores;
  if (openblas)
    settings.blas = request.blas() > 0 ? static_cast<int>(request.blas()) : blas_pool ? cores : 1;
  return settings;
}

ThreadSettings planned_threads(const ThreadRequest& request) {
  const int64_t processes = std::max<int64_t>(1, request.processes());
  return choose_threads(request,
                        static_cast<int>(std::max<int64_t>(1, available_cores() / processes)),
                        openblas_set() != nullptr);
}

ThreadSettings apply_threads(const ThreadRequest& request) {
  const SetThreads set_blas = openblas_set();
  ThreadSettings settings = planned_threads(request);
  torch::set_num_threads(settings.openmp);
  settings.openmp = torch::get_num_threads();
  if (set_blas != nullptr)
    set_blas(settings.blas);
  settings.blas = blas_threads();
  return settings;
}

}  // namespace bigbatch
