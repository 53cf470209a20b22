// bf16 products on fp32 kernels: the choice of kernels, and that outputs and gradients are
// autocast's own bf16 values (up to the order of the sums) in autocast's dtypes.
#include <gtest/gtest.h>

#include <string>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/precision.h"
#include "nn/scoped_setting.h"

namespace bigbatch::nn {
namespace {

/// The bf16 product kernels for one test.
struct ScopedBf16Matmul : testing::ScopedSetting<Bf16Matmul> {
  explicit ScopedBf16Matmul(Bf16Matmul mode) : ScopedSetting(bf16_matmul, set_bf16_matmul, mode) {}
};

/// Outputs and gradients of one product, computed with `mode` under CPU bf16 autocast.
struct ProductResult {
  torch::Tensor output;
  std::vector<torch::Tensor> grads;  ///< of the operands, in their order
};

/// `actual` and `expected` hold the same bf16 values but for summation order: at most 1% of the
/// elements differ, none by more than 2 bf16 ulps of the tensor's largest magnitude.
void expect_same_bf16_values(const torch::Tensor& actual, const torch::Tensor& expected,
                             const std::string& what) {
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const torch::Tensor a = actual.to(torch::kDouble);
  const torch::Tensor e = expected.to(torch::kDouble);
  const double differing = a.ne(e).to(torch::kDouble).mean().item<double>();
  EXPECT_LT(differing, 0.01) << what;
  const double scale = e.abs().max().item<double>();
  EXPECT_LE((a - e).abs().max().item<double>(), 2.0 * scale / 128.0) << what;
  EXPECT_GT(scale, 0.0) << what;
}

ProductResult run_linear(Bf16Matmul mode, bool with_bias) {
  const ScopedBf16Matmul choice(mode);
  torch::manual_seed(3);
  const torch::Tensor input = torch::randn({4, 5, 48}).requires_grad_();  // (B, T, in)
  const torch::Tensor weight = torch::randn({24, 48}).requires_grad_();   // (out, in)
  const torch::Tensor bias = torch::randn({24}).requires_grad_();         // (out)
  torch::Tensor output;
  {
    const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    output = nn::linear(input, weight, with_bias ? bias : torch::Tensor());  // (B, T, out)
  }
  // The same upstream gradient for both modes (one from a loss of the output would differ
  // wherever the outputs differ by their summation order).
  output.backward(torch::randn({4, 5, 24}).to(torch::kBFloat16));
  ProductResult result{output.detach(), {input.grad(), weight.grad()}};
  if (with_bias)
    result.grads.push_back(bias.grad());
  else
    EXPECT_FALSE(bias.grad().defined());
  return result;
}

TEST(Bf16Matmul, ParsesPrintsAndResolvesAgainstTheCpuFlags) {
  for (const Bf16Matmul mode : {Bf16Matmul::kAuto, Bf16Matmul::kNative, Bf16Matmul::kFp32})
    EXPECT_EQ(parse_bf16_matmul(to_string(mode), "model.bf16_matmul"), mode);
  try {
    parse_bf16_matmul("onednn", "model.bf16_matmul");
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("model.bf16_matmul"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("\"onednn\""), std::string::npos);
  }
  EXPECT_EQ(resolve_bf16_matmul(Bf16Matmul::kAuto, {"avx2", "avx512f"}), Bf16Matmul::kFp32);
  EXPECT_EQ(resolve_bf16_matmul(Bf16Matmul::kAuto, {"avx512f", "avx512_bf16"}),
            Bf16Matmul::kNative);
  EXPECT_EQ(resolve_bf16_matmul(Bf16Matmul::kAuto, {"amx_bf16"}), Bf16Matmul::kNative);
  EXPECT_EQ(resolve_bf16_matmul(Bf16Matmul::kAuto, {}), Bf16Matmul::kFp32);
  EXPECT_EQ(resolve_bf16_matmul(Bf16Matmul::kNative, {}), Bf16Matmul::kNative);
  EXPECT_EQ(resolve_bf16_matmul(Bf16Matmul::kFp32, {"amx_bf16"}), Bf16Matmul::kFp32);
  const ScopedBf16Matmul choice(Bf16Matmul::kAuto);
  EXPECT_NE(bf16_matmul(), Bf16Matmul::kAuto);  // resolved against this machine
}

TEST(Bf16Matmul, LinearOnFp32KernelsGivesAutocastsValuesAndDtypes) {
  for (const bool with_bias : {true, false}) {
    const ProductResult native = run_linear(Bf16Matmul::kNative, with_bias);
    const ProductResult fp32 = run_linear(Bf16Matmul::kFp32, with_bias);
    EXPECT_EQ(native.output.scalar_type(), torch::kBFloat16);
    expect_same_bf16_values(fp32.output, native.output,
                            with_bias ? "output with a bias" : "output without a bias");
    ASSERT_EQ(fp32.grads.size(), native.grads.size());
    for (size_t i = 0; i < native.grads.size(); ++i) {
      EXPECT_EQ(native.grads[i].scalar_type(), torch::kFloat);  // through autocast's cast
      expect_same_bf16_values(fp32.grads[i], native.grads[i], "gradient " + std::to_string(i));
    }
  }
}

TEST(Bf16Matmul, BatchedMatmulOnFp32KernelsGivesAutocastsValues) {
  const auto run = [](Bf16Matmul mode) {
    const ScopedBf16Matmul choice(mode);
    torch::manual_seed(4);
    // bf16 operands, as attention's q and k are under autocast.
    const torch::Tensor a = torch::randn({2, 3, 16, 8}).to(torch::kBFloat16).requires_grad_();
    const torch::Tensor b = torch::randn({2, 3, 8, 16}).to(torch::kBFloat16).requires_grad_();
    torch::Tensor product;
    {
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      product = nn::matmul(a, b);  // (2, 3, 16, 16)
    }
    product.backward(torch::randn({2, 3, 16, 16}).to(torch::kBFloat16));
    return ProductResult{product.detach(), {a.grad(), b.grad()}};
  };
  const ProductResult native = run(Bf16Matmul::kNative);
  const ProductResult fp32 = run(Bf16Matmul::kFp32);
  expect_same_bf16_values(fp32.output, native.output, "product");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(native.grads[i].scalar_type(), torch::kBFloat16);
    expect_same_bf16_values(fp32.grads[i], native.grads[i], "gradient " + std::to_string(i));
  }
}

TEST(Bf16Matmul, ScaledProductWithAMaskOnFp32KernelsGivesAutocastsValues) {
  const auto run = [](Bf16Matmul mode) {
    const ScopedBf16Matmul choice(mode);
    torch::manual_seed(7);
    const torch::Tensor a = torch::randn({6, 16, 8}).to(torch::kBFloat16).requires_grad_();
    const torch::Tensor b = torch::randn({6, 8, 16}).to(torch::kBFloat16).requires_grad_();
    const torch::Tensor mask = torch::randn({16, 16}).to(torch::kBFloat16).expand({6, 16, 16});
    torch::Tensor scores;
    {
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      scores = nn::baddbmm(mask, a, b, /*alpha=*/0.3);  // (6, 16, 16)
    }
    const torch::Tensor grad = torch::randn({6, 16, 16}).to(torch::kBFloat16);  // (6, 16, 16)
    scores.backward(grad);
    // The gradients in float64 from the same bf16 values, rounded to bf16 once.
    const auto wide = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
    const torch::Tensor exact_a = torch::matmul(wide(grad), wide(b).transpose(1, 2)) * 0.3;
    const torch::Tensor exact_b = torch::matmul(wide(a).transpose(1, 2), wide(grad)) * 0.3;
    return ProductResult{
        scores.detach(),
        {a.grad(), b.grad(), exact_a.to(torch::kBFloat16), exact_b.to(torch::kBFloat16)}};
  };
  const ProductResult native = run(Bf16Matmul::kNative);
  const ProductResult fp32 = run(Bf16Matmul::kFp32);
  EXPECT_EQ(native.output.scalar_type(), torch::kBFloat16);
  expect_same_bf16_values(fp32.output, native.output, "scores");
  // Backward differs from LibTorch 1.13's on purpose: that one rounds a @ b to bf16 and then
  // multiplies by alpha rounded to bf16 (0.30078), so ~half its elements are off by an ulp or
  // more; here the fp32 product is scaled by the exact alpha and rounded once.
  for (size_t i = 0; i < 2; ++i) {
    expect_same_bf16_values(fp32.grads[i], fp32.grads[i + 2], "gradient " + std::to_string(i));
    const double error = (fp32.grads[i] - fp32.grads[i + 2]).abs().sum().item<double>();
    const double native_error = (native.grads[i] - fp32.grads[i + 2]).abs().sum().item<double>();
    EXPECT_LT(error, native_error) << i;
  }
}

TEST(Bf16Matmul, OutsideBf16AutocastItIsTorchsOwnProduct) {
  const ScopedBf16Matmul choice(Bf16Matmul::kFp32);
  // float32 products on LibTorch's BLAS (nn/fp32_matmul may put them on oneDNN).
  const testing::ScopedSetting<Fp32Matmul> blas(
      fp32_matmul, [](Fp32Matmul mode) { set_fp32_matmul(mode); }, Fp32Matmul::kBlas);
  torch::manual_seed(5);
  torch::nn::Linear layer(6, 3);
  const torch::Tensor x = torch::randn({4, 6});
  EXPECT_TRUE(torch::equal(nn::linear(layer, x), layer->forward(x)));
  const torch::Tensor a = torch::randn({2, 4, 6});
  const torch::Tensor b = torch::randn({2, 6, 5});
  EXPECT_TRUE(torch::equal(nn::matmul(a, b), torch::matmul(a, b)));
  const torch::Tensor mask = torch::randn({4, 5});
  EXPECT_TRUE(torch::equal(nn::baddbmm(mask, a, b, 0.5), torch::baddbmm(mask, a, b, 1.0, 0.5)));
  // float64 is not autocast's to cast: it stays float64 under autocast, as with torch's ops.
  torch::nn::Linear wide(6, 3);
  wide->to(torch::kDouble);
  const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
  const torch::Tensor y = nn::linear(wide, x.to(torch::kDouble));
  EXPECT_EQ(y.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(
      y, torch::nn::functional::linear(x.to(torch::kDouble), wide->weight, wide->bias)));
}

TEST(Bf16Matmul, BroadcastingProductsFallBackToTorch) {
  const ScopedBf16Matmul choice(Bf16Matmul::kFp32);
  torch::manual_seed(6);
  const torch::Tensor a = torch::randn({2, 4, 6}).requires_grad_();
  const torch::Tensor b = torch::randn({6, 5}).requires_grad_();
  torch::Tensor product;
  {
    const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    product = nn::matmul(a, b);  // (2, 4, 5)
    EXPECT_TRUE(torch::equal(product, torch::matmul(a, b)));
  }
  // The fp32-kernel Function takes no broadcasting: its gradient of b would be (2, 6, 5).
  product.to(torch::kFloat).sum().backward();
  EXPECT_EQ(b.grad().sizes(), b.sizes());
}

}  // namespace
}  // namespace bigbatch::nn
