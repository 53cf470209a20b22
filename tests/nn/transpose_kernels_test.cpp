// The bf16 transpose against ATen's: every value moved, for sizes with and without whole register
// blocks, a row stride wider than the row, and the same result at one and two threads.
#include "bigbatch/nn/transpose_kernels.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <tuple>

namespace bigbatch::nn::kernels {
namespace {

/// src^T from the kernel, for src (rows, cols) bf16 read with row stride `stride` >= cols.
torch::Tensor transposed(const torch::Tensor& src, int64_t cols) {
  const int64_t rows = src.size(0);
  torch::Tensor dst = torch::full({cols, rows}, 7.0, torch::kBFloat16);
  transpose_bf16({src.data_ptr<at::BFloat16>(), rows, cols, src.stride(0)},
                 dst.data_ptr<at::BFloat16>(), rows);
  return dst;
}

TEST(TransposeKernels, MovesEveryValueForWholeBlocksEdgesAndWideStrides) {
  // (rows, cols, extra columns of stride): register blocks are 32 rows by 16 columns.
  for (const auto& [rows, cols, extra] : {std::tuple<int64_t, int64_t, int64_t>{64, 32, 0},
                                          {2048, 48, 0},
                                          {33, 17, 0},
                                          {31, 15, 0},
                                          {1, 1, 0},
                                          {96, 40, 5},
                                          {70, 200, 3},
                                          {5, 64, 0}}) {
    torch::manual_seed(rows * 1000 + cols);
    const torch::Tensor wide = torch::randn({rows, cols + extra}).to(torch::kBFloat16);
    const torch::Tensor src = wide.narrow(1, 0, cols);  // rows `cols + extra` apart
    EXPECT_TRUE(torch::equal(transposed(src, cols), src.t().contiguous()))
        << rows << " x " << cols << " stride " << cols + extra;
  }
}

TEST(TransposeKernels, ResultDoesNotDependOnTheThreadCount) {
  const torch::Tensor src = torch::randn({512, 1536}).to(torch::kBFloat16);
  const torch::Tensor many = transposed(src, 1536);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor one = transposed(src, 1536);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(many, one));
  EXPECT_TRUE(torch::equal(many, src.t().contiguous()));
}

}  // namespace
}  // namespace bigbatch::nn::kernels
