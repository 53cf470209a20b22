#include "bigbatch/memory/cuda_stats.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace bigbatch {
namespace {

TEST(CudaStats, AbsentWithoutCudaOrForAMissingDevice) {
  EXPECT_FALSE(memory::cuda_memory_stats(-1).has_value());
  EXPECT_FALSE(memory::cuda_memory_stats(1 << 20).has_value());
#ifndef BIGBATCH_WITH_CUDA
  EXPECT_FALSE(memory::cuda_memory_stats(0).has_value());
#else
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no GPU";
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
