// The fused blocks' shared parts: a weight gradient from its input given as a transposed view of
// a row-major input^T (what the LayerNorm kernels write in passing) is bitwise the one from the
// input itself, a square one copies grad^T where its product may run on one thread, and a
// LayerNorm asked for its transposed result writes it.
#include "bigbatch/nn/fused_block_parts.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/core/system_info.h"
#include "bigbatch/nn/fp32_matmul.h"

namespace bigbatch::nn::block_parts {
namespace {

TEST(FusedBlockParts, AWeightGradientFromATransposedInputIsBitwiseTheOneFromTheInput) {
  torch::manual_seed(5);
  // 1,024 rows, 256 inputs, 768 outputs: a qkv product's gradient, large enough for
  // transposed_input_pays on a CPU with AMX (elsewhere both take the transposed view of grad).
  const int64_t rows = 1024, inputs = 256, outputs = 768;
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const torch::Tensor grad = torch::randn({rows, outputs}, bf16);
  const torch::Tensor input = torch::randn({rows, inputs}, bf16);
  const torch::Tensor input_t = input.t().contiguous();  // (I, N), as the LayerNorm writes it
  const torch::Tensor from_input = weight_grad(true, grad, input, torch::kFloat);
  const torch::Tensor from_view = weight_grad(true, grad, input_t.t(), torch::kFloat);
  ASSERT_EQ(from_input.sizes(), torch::IntArrayRef({outputs, inputs}));
  ASSERT_EQ(from_view.sizes(), from_input.sizes());
  // Where the rule holds both multiply the same row-major input^T: bitwise. Elsewhere the view
  // reaches the product in another layout, which may sum in another order.
  if (transposed_input_pays(rows, outputs, inputs)) {
    EXPECT_TRUE(torch::equal(from_view, from_input));
  }
  // Both are grad^T input, each product rounded once to bf16.
  const torch::Tensor exact = grad.to(torch::kDouble).t().matmul(input.to(torch::kDouble));
  for (const torch::Tensor& result : {from_input, from_view})
    EXPECT_LE(((result.to(torch::kDouble) - exact).abs() - exact.abs() * std::ldexp(1.0, -8))
                  .max()
                  .item<double>(),
              1e-3);
  EXPECT_FALSE(transposed_input_pays(rows, inputs, inputs));  // a square product: never
  EXPECT_FALSE(transposed_input_pays(16, outputs, inputs));   // a small one: never
}

TEST(FusedBlockParts, ASquareWeightGradientCopiesGradTransposedWhereItMayRunOnOneThread) {
  const bool amx = this_cpu_flags().count("amx_bf16") == 1;
  const int64_t rows = 1024, width = 576;  // a Llama's q or o projection
  const ProductThreads one = ProductThreads::kMaybeOne, all = ProductThreads::kAll;
  EXPECT_EQ(transposed_grad_pays(rows, width, width, one), amx);
  EXPECT_FALSE(transposed_grad_pays(rows, width, width, all));
  EXPECT_EQ(transposed_grad_pays(rows, width, 2 * width, all), amx);  // an output projection
  EXPECT_FALSE(transposed_grad_pays(rows, width, width - 1, one));    // fewer inputs than outputs
  EXPECT_FALSE(transposed_grad_pays(16, width, width, one));          // a small product

  torch::manual_seed(7);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const torch::Tensor grad = torch::randn({rows, width}, bf16);   // (N, O)
  const torch::Tensor input = torch::randn({rows, width}, bf16);  // (N, I)
  const WeightProduct on_one = weight_product_operands(grad, input, one);
  const WeightProduct on_all = weight_product_operands(grad, input, all);
  EXPECT_FALSE(on_one.transposed);
  EXPECT_EQ(on_one.a.is_contiguous(), amx);  // a row-major copy of grad^T (O, N), or the view
  EXPECT_FALSE(on_all.a.is_contiguous());
  EXPECT_TRUE(torch::equal(on_one.a, grad.t()));
  EXPECT_TRUE(on_one.b.is_same(input));
  // Either way grad^T input, rounded once to bf16.
  const torch::Tensor exact = grad.to(torch::kDouble).t().matmul(input.to(torch::kDouble));
  for (const WeightProduct& operands : {on_one, on_all}) {
    const torch::Tensor result =
        weight_grad_from_product(operands, gemm(operands.a, operands.b), torch::kFloat);  // (O, I)
    EXPECT_LE(((result.to(torch::kDouble) - exact).abs() - exact.abs() * std::ldexp(1.0, -8))
                  .max()
                  .item<double>(),
              1e-3);
  }
}

TEST(FusedBlockParts, ALayerNormAskedForItsTransposeWritesIt) {
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({300, 48}) * 2.0 + 1.0;  // (N, C)
  const torch::Tensor weight = torch::rand({48}) + 0.5, bias = torch::randn({48});
  const NormedRows plain = layer_norm_in(x, weight, bias, 1e-5, torch::kBFloat16);
  const NormedRows with = layer_norm_in(x, weight, bias, 1e-5, torch::kBFloat16, true);
  EXPECT_FALSE(plain.transposed.defined());
  ASSERT_TRUE(with.transposed.defined());
  EXPECT_TRUE(torch::equal(with.normed, plain.normed));
  EXPECT_TRUE(torch::equal(with.transposed, plain.normed.t()));
  EXPECT_TRUE(torch::equal(with.for_weight_grad(), plain.normed));
  EXPECT_TRUE(with.for_weight_grad().t().is_contiguous());  // the view weight_grad recognises
  // In float32 (no row kernels) none is written, and the rows are what weight_grad reads.
  const NormedRows fp32 = layer_norm_in(x, weight, bias, 1e-5, torch::kFloat, true);
  EXPECT_FALSE(fp32.transposed.defined());
  EXPECT_TRUE(fp32.for_weight_grad().is_same(fp32.normed));
}

}  // namespace
}  // namespace bigbatch::nn::block_parts
