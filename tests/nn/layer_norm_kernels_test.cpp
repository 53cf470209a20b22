#include "bigbatch/nn/layer_norm_kernels.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

namespace bigbatch::nn::kernels {
namespace {

/// max |a - b| / max(1e-30, max |b|), in float64.
double relative_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor wide = b.to(torch::kFloat64);
  const double scale = std::max(1e-30, wide.abs().max().item<double>());
  return (a.to(torch::kFloat64) - wide).abs().max().item<double>() / scale;
}

/// Rows of a LayerNorm the kernels are checked on: an odd width (a vector tail), more rows than
/// two chunks (so two threads each take part of them), and rows far from zero (the variance of
/// 1000 + noise cancels catastrophically when taken as mean(x^2) - mean(x)^2 in float32).
struct Case {
  torch::Tensor x, weight, bias;  // (M, C), (C), (C) float32
};

Case example(int64_t rows, int64_t channels, double offset) {
  torch::manual_seed(rows + channels);
  return {torch::randn({rows, channels}) * 3.0 + offset, torch::rand({channels}) + 0.5,
          torch::randn({channels})};
}

struct Normed {
  torch::Tensor y, mean, rstd;  // (M, C) bf16, (M) float32 each
};

/// The forward's result y, and y^T where `transposed` is given (C, M).
Normed run_forward(const Case& c, float eps, torch::Tensor* transposed = nullptr) {
  const int64_t rows = c.x.size(0), channels = c.x.size(1);
  Normed out{torch::empty({rows, channels}, torch::kBFloat16), torch::empty({rows}),
             torch::empty({rows})};
  LayerNormToBf16Rows args;
  args.input = c.x.data_ptr<float>();
  args.weight = c.weight.data_ptr<float>();
  args.bias = c.bias.data_ptr<float>();
  args.output = out.y.data_ptr<at::BFloat16>();
  if (transposed != nullptr) {
    *transposed = torch::full({channels, rows}, 7.0, torch::kBFloat16);
    args.output_transposed = transposed->data_ptr<at::BFloat16>();
  }
  args.mean = out.mean.data_ptr<float>();
  args.rstd = out.rstd.data_ptr<float>();
  args.shape = {rows, channels};
  args.eps = eps;
  layer_norm_to_bf16_rows(args);
  return out;
}

struct Grads {
  torch::Tensor dx, d_weight, d_bias;  // undefined where not asked for
};

Grads run_backward(const Case& c, const Normed& forward, const torch::Tensor& dy,
                   const torch::Tensor& residual, std::array<bool, 3> wanted) {
  Grads out{wanted[0] ? torch::empty_like(c.x) : torch::Tensor(),
            wanted[1] ? torch::empty_like(c.weight) : torch::Tensor(),
            wanted[2] ? torch::empty_like(c.bias) : torch::Tensor()};
  const auto pointer = [](const torch::Tensor& t) {
    return t.defined() ? t.data_ptr<float>() : nullptr;
  };
  LayerNormBackwardFromBf16Rows args;
  args.grad_output = dy.data_ptr<at::BFloat16>();
  args.input = c.x.data_ptr<float>();
  args.weight = c.weight.data_ptr<float>();
  args.mean = forward.mean.data_ptr<float>();
  args.rstd = forward.rstd.data_ptr<float>();
  args.residual = pointer(residual);
  args.grad_input = pointer(out.dx);
  args.grad_weight = pointer(out.d_weight);
  args.grad_bias = pointer(out.d_bias);
  args.shape = {c.x.size(0), c.x.size(1)};
  layer_norm_backward_from_bf16_rows(args);
  return out;
}

/// Runs `work` at the thread count it has, then at one thread, and returns both results.
template <typename Work>
auto at_two_thread_counts(const Work& work) {
  const auto many = work();
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = work();
  at::set_num_threads(threads);
  return std::make_pair(many, one);
}

TEST(LayerNormKernels, ForwardIsFloat64sLayerNormRoundedOnceToBf16) {
  for (const double offset : {0.0, 1000.0}) {
    SCOPED_TRACE(offset);
    const Case c = example(150, 37, offset);
    const float eps = 1e-5f;
    const Normed fused = run_forward(c, eps);
    torch::Tensor y64, mean64, rstd64;
    std::tie(y64, mean64, rstd64) =
        at::native_layer_norm(c.x.to(torch::kFloat64), {37}, c.weight.to(torch::kFloat64),
                              c.bias.to(torch::kFloat64), eps);
    // One rounding to bf16 (half a unit of its 8 bits: at most 2^-8 relative) of a float32
    // LayerNorm, whose own error (float32's LayerNorm against float64's, which cancellation makes
    // larger for rows far from zero) it may have twice over.
    const torch::Tensor composite32 =
        std::get<0>(at::native_layer_norm(c.x, {37}, c.weight, c.bias, eps));  // (M, C)
    const double float32_error = (composite32.to(torch::kFloat64) - y64).abs().max().item<double>();
    const torch::Tensor error = (fused.y.to(torch::kFloat64) - y64).abs();
    EXPECT_TRUE((error <= y64.abs() / 256 + 2 * float32_error).all().item<bool>())
        << (error - y64.abs() / 256).max().item<double>() << " float32 error " << float32_error;
    EXPECT_LT(relative_diff(fused.mean, mean64.view({-1})), 1e-6);
    EXPECT_LT(relative_diff(fused.rstd, rstd64.view({-1})), 1e-5);
    // Against float32 LayerNorm then a cast (the composite's steps): the same bf16 value but
    // where the two float32 results straddle a rounding boundary.
    const torch::Tensor composite = composite32.to(torch::kBFloat16);
    const double same = fused.y.eq(composite).to(torch::kFloat64).mean().item<double>();
    EXPECT_GT(same, 0.97) << same;
  }
}

TEST(LayerNormKernels, BackwardIsFloat64sFromTheWidenedBf16GradientPlusTheResidual) {
  const Case c = example(150, 37, 3.0);
  const Normed forward = run_forward(c, 1e-5f);
  const torch::Tensor dy = torch::randn({150, 37}).to(torch::kBFloat16);
  const torch::Tensor residual = torch::randn({150, 37});
  const Grads fused = run_backward(c, forward, dy, residual, {true, true, true});

  torch::Tensor dx64, dw64, db64;
  const auto wide = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
  std::tie(dx64, dw64, db64) = at::native_layer_norm_backward(
      wide(dy), wide(c.x), {37}, wide(forward.mean).view({-1, 1}), wide(forward.rstd).view({-1, 1}),
      wide(c.weight), wide(c.bias), {true, true, true});
  EXPECT_LT(relative_diff(fused.dx, dx64 + wide(residual)), 1e-5);
  EXPECT_LT(relative_diff(fused.d_weight, dw64), 1e-5);
  EXPECT_LT(relative_diff(fused.d_bias, db64), 1e-5);

  // Without the residual, and with only some of the gradients asked for.
  const Grads bare = run_backward(c, forward, dy, torch::Tensor(), {true, false, true});
  EXPECT_LT(relative_diff(bare.dx, dx64), 1e-5);
  EXPECT_FALSE(bare.d_weight.defined());
  EXPECT_TRUE(torch::equal(bare.d_bias, fused.d_bias));
  const Grads weights_only = run_backward(c, forward, dy, residual, {false, true, false});
  EXPECT_TRUE(torch::equal(weights_only.d_weight, fused.d_weight));
}

TEST(LayerNormKernels, ColumnSumsAreFloat64sOfTheWidenedValues) {
  torch::manual_seed(3);
  const torch::Tensor values = (torch::randn({300, 70}) + 2.0).to(torch::kBFloat16);
  torch::Tensor sums = torch::empty({70});
  bf16_column_sums(values.data_ptr<at::BFloat16>(), {300, 70}, sums.data_ptr<float>());
  EXPECT_LT(relative_diff(sums, values.to(torch::kFloat64).sum(0)), 1e-6);
}

TEST(LayerNormKernels, TheTransposedOutputIsTheOutputTransposedBitwise) {
  // 700 rows: two threads, chunks of 64 and a short last one; widths with and without a tail of
  // the transpose's 16-value blocks.
  for (const int64_t channels : {int64_t(64), int64_t(70)}) {
    const Case c = example(700, channels, 1.0);
    torch::Tensor transposed;
    const Normed with = run_forward(c, 1e-5f, &transposed);
    const Normed without = run_forward(c, 1e-5f);
    EXPECT_TRUE(torch::equal(with.y, without.y)) << channels;
    EXPECT_TRUE(torch::equal(transposed, with.y.t())) << channels;
  }
}

TEST(LayerNormKernels, RoundedRowsAreTheBf16CastAndTheirColumnSumsBitwise) {
  torch::manual_seed(4);
  // 700 x 256: parallel at two threads, the last chunk of rows short; 5 x 9: on one thread.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{700, 256}, {5, 9}}) {
    torch::Tensor values = torch::randn({rows, cols}) * 3.0;
    values[0][0] = std::numeric_limits<float>::quiet_NaN();
    values[1][1] = std::numeric_limits<float>::infinity();
    values[2][2] = 1.0f + std::ldexp(1.0f, -8);  // halfway between two bf16: rounds to even
    values[3][3] = 3e38f;                        // rounds up to infinity
    // c10::BFloat16's rounding, value by value (ATen's vectorised cast writes NaN as 0xFFFF, not
    // c10::BFloat16's 0x7FC0; every other value alike).
    torch::Tensor expected = torch::empty({rows, cols}, torch::kBFloat16);
    for (int64_t i = 0; i < rows * cols; ++i)
      expected.data_ptr<at::BFloat16>()[i] = c10::BFloat16(values.data_ptr<float>()[i]);
    const torch::Tensor finite = values.isfinite();
    EXPECT_TRUE(torch::equal(expected.masked_select(finite).to(torch::kFloat),
                             values.to(torch::kBFloat16).masked_select(finite).to(torch::kFloat)));
    torch::Tensor expected_sums = torch::empty({cols});
    bf16_column_sums(expected.data_ptr<at::BFloat16>(), {rows, cols},
                     expected_sums.data_ptr<float>());
    torch::Tensor rounded = torch::empty({rows, cols}, torch::kBFloat16);
    torch::Tensor sums = torch::empty({cols});
    bf16_rows_and_column_sums(values.data_ptr<float>(), {rows, cols},
                              rounded.data_ptr<at::BFloat16>(), sums.data_ptr<float>());
    // Bitwise, NaN included: compare the bits.
    EXPECT_TRUE(torch::equal(rounded.view(torch::kInt16), expected.view(torch::kInt16))) << rows;
    EXPECT_TRUE(torch::equal(sums.view(torch::kInt32), expected_sums.view(torch::kInt32))) << rows;
    torch::Tensor alone = torch::empty({rows, cols}, torch::kBFloat16);
    bf16_rows_and_column_sums(values.data_ptr<float>(), {rows, cols},
                              alone.data_ptr<at::BFloat16>(), nullptr);
    EXPECT_TRUE(torch::equal(alone.view(torch::kInt16), expected.view(torch::kInt16))) << rows;
  }
}

TEST(LayerNormKernels, ResultsDoNotDependOnTheThreadCount) {
  const Case c = example(700, 256, 1.0);  // 179K values: parallel at two threads
  const torch::Tensor dy = torch::randn({700, 256}).to(torch::kBFloat16);
  const torch::Tensor residual = torch::randn({700, 256});
  const auto [many, one] = at_two_thread_counts([&] {
    const Normed forward = run_forward(c, 1e-5f);
    const Grads grads = run_backward(c, forward, dy, residual, {true, true, true});
    torch::Tensor sums = torch::empty({256});
    bf16_column_sums(dy.data_ptr<at::BFloat16>(), {700, 256}, sums.data_ptr<float>());
    torch::Tensor rounded = torch::empty({700, 256}, torch::kBFloat16);
    torch::Tensor rounded_sums = torch::empty({256});
    bf16_rows_and_column_sums(residual.data_ptr<float>(), {700, 256},
                              rounded.data_ptr<at::BFloat16>(), rounded_sums.data_ptr<float>());
    return std::vector<torch::Tensor>{forward.y, forward.mean,   forward.rstd,
                                      grads.dx,  grads.d_weight, grads.d_bias,
                                      sums,      rounded,        rounded_sums};
  });
  for (size_t i = 0; i < many.size(); ++i)
    EXPECT_TRUE(torch::equal(many[i], one[i])) << i;
}

}  // namespace
}  // namespace bigbatch::nn::kernels
