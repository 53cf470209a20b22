// Thread settings per matmul backend: the automatic choice, explicit requests, applying them,
// and a thread's own count for a scope.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <thread>

#include "bigbatch/core/check.h"
#include "bigbatch/core/threads.h"

namespace bigbatch {
namespace {

TEST(Threads, AutomaticSettingsGiveTheCoresToTheLibraryThatRunsTheMatmuls) {
  const ThreadSettings blas = choose_threads(ThreadRequest().backend(MatmulBackend::kBlas), 8);
  EXPECT_EQ(blas.openmp, 1);
  EXPECT_EQ(blas.blas, 8);
  const ThreadSettings onednn = choose_threads(ThreadRequest().backend(MatmulBackend::kOneDnn), 8);
  EXPECT_EQ(onednn.openmp, 8);
  EXPECT_EQ(onednn.blas, 1);
  EXPECT_EQ(onednn.describe(), "OpenMP 8, OpenBLAS 1 (matmuls: oneDNN)");
  EXPECT_EQ(blas.describe(), "OpenMP 1, OpenBLAS 8 (fp32: OpenBLAS)");
}

TEST(Threads, WithoutOpenBlasTheOpenMpThreadsRunEveryMatmul) {
  // MKL (the PyTorch wheel's BLAS) and oneDNN both run on the OpenMP threads.
  const ThreadSettings blas =
      choose_threads(ThreadRequest().backend(MatmulBackend::kBlas), 8, /*openblas=*/false);
  EXPECT_EQ(blas.openmp, 8);
  EXPECT_EQ(blas.blas, 0);
  EXPECT_EQ(blas.describe(), "OpenMP 8 (fp32: the BLAS on the OpenMP threads)");
  const ThreadSettings onednn =
      choose_threads(ThreadRequest().backend(MatmulBackend::kOneDnn), 8, /*openblas=*/false);
  EXPECT_EQ(onednn.openmp, 8);
  EXPECT_EQ(onednn.blas, 0);
  EXPECT_EQ(onednn.describe(), "OpenMP 8 (matmuls: oneDNN)");
  const ThreadSettings asked =
      choose_threads(ThreadRequest().openmp(3).blas(2), 8, /*openblas=*/false);
  EXPECT_EQ(asked.openmp, 3);
  EXPECT_EQ(asked.blas, 0);  // nothing to set
}

TEST(Threads, ExplicitRequestsAreKeptAndNegativeOnesRefused) {
  const ThreadSettings s =
      choose_threads(ThreadRequest().backend(MatmulBackend::kOneDnn).openmp(3).blas(2), 8);
  EXPECT_EQ(s.openmp, 3);
  EXPECT_EQ(s.blas, 2);
  EXPECT_THROW(choose_threads(ThreadRequest().openmp(-1), 2), InputError);
  EXPECT_THROW(choose_threads(ThreadRequest().blas(-1), 2), InputError);
}

TEST(Threads, ApplyingSetsOpenMpAndOpenBlas) {
  const int openmp_before = torch::get_num_threads();
  const int blas_before = blas_threads();
  const ThreadSettings applied = apply_threads(ThreadRequest().openmp(2).blas(1));
  EXPECT_EQ(applied.openmp, 2);
  EXPECT_EQ(torch::get_num_threads(), 2);
  if (blas_before == 0)
    GTEST_SKIP() << "LibTorch's BLAS is not OpenBLAS here";
  EXPECT_EQ(applied.blas, 1);
  EXPECT_EQ(blas_threads(), 1);
  apply_threads(ThreadRequest().openmp(openmp_before).blas(blas_before));
  EXPECT_EQ(blas_threads(), blas_before);
}

TEST(Threads, AHelperThreadGetsOneIntraOpThreadAndTheOthersKeepTheirs) {
  const int before = torch::get_num_threads();
  torch::set_num_threads(2);
  const auto threads_seen = [](bool limit) {
    int seen = 0;
    std::thread helper([&] {
      if (limit)
        use_one_intra_op_thread_on_this_thread();
      // A parallel operation, as the prefetcher's gathering runs, then the count it ran under.
      (void)torch::ones({1 << 16}).sum();
      seen = torch::get_num_threads();
    });
    helper.join();
    return seen;
  };
  EXPECT_EQ(threads_seen(false), 2);       // a new thread inherits the process's setting...
  EXPECT_EQ(threads_seen(true), 1);        // ...unless it asks for one
  EXPECT_EQ(torch::get_num_threads(), 2);  // the calling thread's is untouched
  EXPECT_EQ(threads_seen(false), 2);       // and so is the process's
  torch::set_num_threads(before);
}

TEST(Threads, AScopeGivesThisThreadMoreThreadsAndPutsItsOwnCountBack) {
  const int before = torch::get_num_threads();
  torch::set_num_threads(1);
  // MKL's own count, where MKL is LibTorch's BLAS (the PyTorch wheel): it runs the products.
  using GetThreads = int (*)();
  const auto mkl_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "mkl_get_max_threads"));
  {
    IntraOpThreadsOnThisThread all(2);
    EXPECT_EQ(torch::get_num_threads(), 2);
    if (mkl_threads != nullptr) {
      EXPECT_EQ(mkl_threads(), 2);
    }
    {
      IntraOpThreadsOnThisThread one(1);
      EXPECT_EQ(torch::get_num_threads(), 1);
    }
    EXPECT_EQ(torch::get_num_threads(), 2);
  }
  EXPECT_EQ(torch::get_num_threads(), 1);
  if (mkl_threads != nullptr) {
    EXPECT_EQ(mkl_threads(), 1);
  }
  torch::set_num_threads(before);
}

}  // namespace
}  // namespace bigbatch
