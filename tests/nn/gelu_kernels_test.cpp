// The bf16 GELU kernels against ATen's: the forward bitwise at::gelu for every bf16 bit pattern
// (NaN, infinities and subnormals included) and for counts that leave a partial vector; the
// backward bitwise the float32 product dy * GELU'(x) rounded as c10::BFloat16 rounds, and within
// one bf16 step of at::gelu_backward in bf16; the backward with column sums bitwise the backward
// and bf16_column_sums of its result.
#include "bigbatch/nn/gelu_kernels.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "bigbatch/nn/layer_norm_kernels.h"

namespace bigbatch::nn::kernels {
namespace {

using torch::Tensor;

/// Every bf16 bit pattern once, (65536) bf16.
Tensor every_pattern() {
  return torch::arange(int64_t(1) << 16, torch::kInt32).to(torch::kInt16).view(torch::kBFloat16);
}

Tensor gelu_from_kernel(const Tensor& x) {
  Tensor y = torch::full_like(x, 7.0);
  bf16_gelu(x.data_ptr<at::BFloat16>(), y.data_ptr<at::BFloat16>(), x.numel());
  return y;
}

Tensor gelu_backward_from_kernel(const Tensor& dy, const Tensor& x) {
  Tensor dx = torch::full_like(x, 7.0);
  bf16_gelu_backward(dy.data_ptr<at::BFloat16>(), x.data_ptr<at::BFloat16>(),
                     dx.data_ptr<at::BFloat16>(), x.numel());
  return dx;
}

/// The bits of a bf16 tensor, so that NaNs compare equal to themselves.
Tensor bits(const Tensor& t) {
  return t.view(torch::kInt16);
}

TEST(GeluKernels, ForwardIsAtenGeluForEveryBf16Value) {
  const Tensor x = every_pattern();
  EXPECT_TRUE(torch::equal(bits(gelu_from_kernel(x)), bits(at::gelu(x))));
}

TEST(GeluKernels, ForwardCoversPartialVectorsAndManyTasks) {
  for (const int64_t count : {int64_t(1), int64_t(15), int64_t(17), int64_t(100003)}) {
    torch::manual_seed(count);
    const Tensor x = (3 * torch::randn({count})).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(bits(gelu_from_kernel(x)), bits(at::gelu(x)))) << count << " values";
  }
}

TEST(GeluKernels, BackwardRoundsTheFloatProductOfTheGradientAndGeluSlope) {
  const Tensor x = every_pattern();
  for (const double scale : {1.0, 1e-38, 1e38}) {  // normal, subnormal, infinite gradients
    torch::manual_seed(int64_t(scale > 1 ? 3 : scale < 1 ? 2 : 1));
    const Tensor dy = (scale * torch::randn({x.numel()})).to(torch::kBFloat16);
    const Tensor slope = at::gelu_backward(torch::ones({x.numel()}), x.to(torch::kFloat));
    const Tensor expected = (dy.to(torch::kFloat) * slope).to(torch::kBFloat16);
    const Tensor got = gelu_backward_from_kernel(dy, x);
    const Tensor both_nan = got.isnan() & expected.isnan();
    EXPECT_TRUE(
        torch::equal(bits(got).masked_fill(both_nan, 0), bits(expected).masked_fill(both_nan, 0)))
        << "gradients of scale " << scale;
    EXPECT_TRUE(torch::equal(got.isnan(), expected.isnan())) << "gradients of scale " << scale;
  }
}

TEST(GeluKernels, BackwardIsWithinOneBf16StepOfAtenGeluBackward) {
  torch::manual_seed(4);
  const int64_t count = 100003;  // a partial vector at the end
  const Tensor x = (3 * torch::randn({count})).to(torch::kBFloat16);
  const Tensor dy = torch::randn({count}).to(torch::kBFloat16);
  const Tensor got = gelu_backward_from_kernel(dy, x).to(torch::kFloat);
  const Tensor aten = at::gelu_backward(dy, x).to(torch::kFloat);
  const Tensor step = aten.abs() * std::ldexp(1.0, -7);  // bf16 keeps 8 significant bits
  EXPECT_TRUE(((got - aten).abs() <= step).all().item<bool>());
  EXPECT_LE((got != aten).sum().item<int64_t>(), count / 1000);  // the same value nearly always
}

TEST(GeluKernels, ResultsDoNotDependOnTheThreadCount) {
  torch::manual_seed(5);
  const Tensor x = torch::randn({300000}).to(torch::kBFloat16);
  const Tensor dy = torch::randn({300000}).to(torch::kBFloat16);
  const Tensor y = gelu_from_kernel(x), dx = gelu_backward_from_kernel(dy, x);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const Tensor y_one = gelu_from_kernel(x), dx_one = gelu_backward_from_kernel(dy, x);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(y, y_one));
  EXPECT_TRUE(torch::equal(dx, dx_one));
}

/// The fused backward of (rows, channels) values: dx and the column sums of dx.
std::pair<Tensor, Tensor> gelu_backward_with_sums(const Tensor& dy, const Tensor& x) {
  Tensor dx = torch::full_like(x, 7.0);
  Tensor sums = torch::full({x.size(1)}, 7.0);
  bf16_gelu_backward_with_column_sums(dy.data_ptr<at::BFloat16>(), x.data_ptr<at::BFloat16>(),
                                      dx.data_ptr<at::BFloat16>(), {x.size(0), x.size(1)},
                                      sums.data_ptr<float>());
  return {dx, sums};
}

TEST(GeluKernels, BackwardWithColumnSumsIsTheBackwardAndItsColumnSumsBitwise) {
  // Rows that end in a short chunk of 64, channels that end in a partial vector, and a row of
  // gradients that overflows; sums over enough rows to run on every thread.
  for (const auto& [rows, channels] : {std::pair<int64_t, int64_t>{1, 5}, {130, 37}, {300, 2048}}) {
    torch::manual_seed(rows);
    const Tensor x = (3 * torch::randn({rows, channels})).to(torch::kBFloat16);
    Tensor dy = torch::randn({rows, channels});
    dy[rows / 2] *= 1e38;
    dy = dy.to(torch::kBFloat16);
    const auto [dx, sums] = gelu_backward_with_sums(dy, x);
    EXPECT_TRUE(torch::equal(bits(dx), bits(gelu_backward_from_kernel(dy, x))))
        << rows << " x " << channels;
    Tensor expected = torch::empty({channels});
    bf16_column_sums(dx.data_ptr<at::BFloat16>(), {rows, channels}, expected.data_ptr<float>());
    const Tensor both_nan = sums.isnan() & expected.isnan();
    EXPECT_TRUE(torch::equal(sums.masked_fill(both_nan, 0), expected.masked_fill(both_nan, 0)))
        << rows << " x " << channels;
    EXPECT_TRUE(torch::allclose(
        sums.masked_fill(both_nan, 0),
        dx.to(torch::kDouble).sum(0).to(torch::kFloat).masked_fill(both_nan, 0), 1e-4, 1e-3))
        << rows << " x " << channels;
  }
}

TEST(GeluKernels, BackwardWithColumnSumsDoesNotDependOnTheThreadCount) {
  torch::manual_seed(6);
  const Tensor x = torch::randn({1000, 300}).to(torch::kBFloat16);
  const Tensor dy = torch::randn({1000, 300}).to(torch::kBFloat16);
  const auto [dx, sums] = gelu_backward_with_sums(dy, x);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto [dx_one, sums_one] = gelu_backward_with_sums(dy, x);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(dx, dx_one));
  EXPECT_TRUE(torch::equal(sums, sums_one));
}

}  // namespace
}  // namespace bigbatch::nn::kernels
