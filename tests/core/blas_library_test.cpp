// Which BLAS LibTorch calls, from the library that provides sgemm_.
#include "bigbatch/core/blas_library.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace bigbatch {
namespace {

TEST(BlasLibrary, ClassifiesDebiansAlternativesByPath) {
  EXPECT_EQ(classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"),
            BlasKind::kOpenBlas);
  EXPECT_EQ(classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3"),
            BlasKind::kOpenBlas);
  EXPECT_EQ(classify_blas_path("/usr/lib/x86_64-linux-gnu/libopenblasp-r0.3.21.so"),
            BlasKind::kOpenBlas);
  EXPECT_EQ(classify_blas_path("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"),
            BlasKind::kReference);
  EXPECT_EQ(classify_blas_path("/usr/lib/aarch64-linux-gnu/blis-openmp/libblas.so.3"),
            BlasKind::kBlis);
  EXPECT_EQ(classify_blas_path("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3"), BlasKind::kAtlas);
  EXPECT_EQ(classify_blas_path("/opt/intel/lib/libmkl_rt.so.2"), BlasKind::kMkl);
  EXPECT_EQ(classify_blas_path("/opt/lib/libsomething.so"), BlasKind::kOther);
  EXPECT_EQ(to_string(BlasKind::kReference), "reference BLAS");
}

// scripts/setup installs libopenblas0-pthread, Debian's LibTorch calls it through libblas.so.3.
TEST(BlasLibrary, LibTorchCallsTheBlasItWasBuiltWith) {
  torch::mm(torch::ones({4, 4}), torch::ones({4, 4}));  // LibTorch and its BLAS loaded
  const BlasLibrary blas = loaded_blas();
  if (at::hasMKL()) {  // the PyTorch wheel: MKL inside libtorch_cpu.so
    EXPECT_EQ(blas.kind, BlasKind::kMkl) << blas.path << " -> " << blas.resolved;
    EXPECT_NE(blas.resolved.find("libtorch_cpu.so"), std::string::npos) << blas.resolved;
    EXPECT_EQ(blas.config, "linked into LibTorch, on the OpenMP threads");
    return;
  }
  // Debian's LibTorch: the OpenBLAS of libopenblas0-pthread.
  EXPECT_EQ(blas.kind, BlasKind::kOpenBlas) << blas.path << " -> " << blas.resolved;
  EXPECT_EQ(blas.variant, "pthread") << blas.resolved;
  EXPECT_EQ(blas.config.rfind("OpenBLAS ", 0), 0u) << blas.config;
  EXPECT_FALSE(blas.core.empty());
  EXPECT_NE(blas.config.find(blas.core), std::string::npos) << blas.config << " / " << blas.core;
}

}  // namespace
}  // namespace bigbatch
