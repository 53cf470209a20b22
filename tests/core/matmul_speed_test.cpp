// Timing a matrix product.
#include "bigbatch/core/matmul_speed.h"

#include <gtest/gtest.h>

namespace bigbatch {
namespace {

TEST(MatmulSpeed, MeasuresAPositiveRateOnAChosenSize) {
  for (const torch::Dtype dtype : {torch::kFloat, torch::kBFloat16}) {
    const MatmulSpeed speed = measure_matmul(dtype, 0.05);
    EXPECT_GT(speed.gflops, 0.0);
    EXPECT_TRUE(speed.size == 256 || speed.size == 512 || speed.size == 1024) << speed.size;
    EXPECT_GE(speed.products, 1);
    EXPECT_GE(speed.seconds, 0.05);
    const double n = static_cast<double>(speed.size);
    EXPECT_DOUBLE_EQ(speed.gflops,
                     2 * n * n * n * static_cast<double>(speed.products) / speed.seconds / 1e9);
  }
}

}  // namespace
}  // namespace bigbatch
