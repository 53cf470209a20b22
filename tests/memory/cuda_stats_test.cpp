#include "bigbatch/memory/cuda_stats.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace bigbatch {
namespace {

TEST(CudaStats, AbsentWithoutCudaOrForAMissingDevice) {
  EXPECT_FALSE(memory::cuda_memory_stats(-1).has_value());
  EXPECT_FALSE(memory::cuda_memory_stats(1 << 20).has_value());
  if (!torch::cuda::is_available()) {  // a CPU-only build, or a CUDA build without a GPU
    EXPECT_FALSE(memory::cuda_memory_stats(0).has_value());
  }
}

TEST(CudaStats, CountTheCachingAllocatorOnAGpu) {
#ifndef BIGBATCH_WITH_CUDA
  GTEST_SKIP() << "a CPU-only build: no CUDA statistics to read";
#else
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no GPU on this machine (the CUDA build's statistics are read on a GPU)";
  const torch::Tensor x = torch::empty({1 << 20}, torch::TensorOptions().device(torch::kCUDA));
  const auto stats = memory::cuda_memory_stats(0);
  ASSERT_TRUE(stats.has_value());
  EXPECT_GE(stats->allocated, 4 << 20);
  EXPECT_GE(stats->peak_allocated, stats->allocated);
  EXPECT_GE(stats->reserved, stats->allocated);
#endif
}

}  // namespace
}  // namespace bigbatch
