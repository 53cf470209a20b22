// float32 products on oneDNN: the choice of kernels, and that products, Linears and their
// gradients equal LibTorch's own up to float32 rounding, with the right shapes and no gradient
// where none is wanted.
#include <gtest/gtest.h>

#include <string>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/precision.h"
#include "nn/scoped_setting.h"

namespace bigbatch::nn {
namespace {

/// The float32 product kernels for one test.
struct ScopedFp32Matmul : testing::ScopedSetting<Fp32Matmul> {
  explicit ScopedFp32Matmul(Fp32Matmul mode)
      : ScopedSetting(
            fp32_matmul, [](Fp32Matmul m) { set_fp32_matmul(m); }, mode) {}
};

/// Skips (with the reason) where this machine cannot run oneDNN's float32 kernels.
#define SKIP_WITHOUT_ONEDNN_FP32()                                                           \
  if (!onednn_fp32_available())                                                              \
  GTEST_SKIP() << "oneDNN's float32 kernels are not available here (LibTorch 2.x on x86-64 " \
                  "with avx512bw/vl/dq or avx_ne_convert)"

/// `actual` equals `expected` up to float32 rounding of sums of `terms` products: the largest
/// difference at most 8 * terms float32 epsilons of the largest magnitude, and not all equal to
/// zero (a kernel that wrote nothing would fail).
void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, int64_t terms,
                  const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_EQ(actual.scalar_type(), torch::kFloat) << what;
  const torch::Tensor a = actual.to(torch::kDouble), e = expected.to(torch::kDouble);
  const double scale = e.abs().max().item<double>();
  EXPECT_GT(scale, 0.0) << what;
  EXPECT_LE((a - e).abs().max().item<double>(), 8.0 * double(terms) * 1.2e-7 * scale) << what;
}

TEST(Fp32Matmul, ParsesPrintsAndResolvesAgainstTheMachine) {
  for (const Fp32Matmul mode : {Fp32Matmul::kAuto, Fp32Matmul::kBlas, Fp32Matmul::kOneDnn})
    EXPECT_EQ(parse_fp32_matmul(to_string(mode), "model.fp32_matmul"), mode);
  try {
    parse_fp32_matmul("mkl", "model.fp32_matmul");
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("model.fp32_matmul"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("\"mkl\""), std::string::npos);
  }
  const Fp32MatmulFacts amd{true, true, "AuthenticAMD"};
  EXPECT_EQ(resolve_fp32_matmul(Fp32Matmul::kAuto, amd), Fp32Matmul::kOneDnn);
  EXPECT_EQ(resolve_fp32_matmul(Fp32Matmul::kAuto, {true, true, "GenuineIntel"}),
            Fp32Matmul::kBlas);
  EXPECT_EQ(resolve_fp32_matmul(Fp32Matmul::kAuto, {false, true, "AuthenticAMD"}),
            Fp32Matmul::kBlas);
  EXPECT_EQ(resolve_fp32_matmul(Fp32Matmul::kAuto, {true, false, "AuthenticAMD"}),
            Fp32Matmul::kBlas);
  EXPECT_EQ(resolve_fp32_matmul(Fp32Matmul::kBlas, amd), Fp32Matmul::kBlas);
  EXPECT_EQ(resolve_fp32_matmul(Fp32Matmul::kOneDnn, {}), Fp32Matmul::kOneDnn);
  const ScopedFp32Matmul choice(Fp32Matmul::kAuto);
  EXPECT_EQ(fp32_matmul(), resolve_fp32_matmul(Fp32Matmul::kAuto, this_fp32_matmul_facts()));
}

TEST(Fp32Matmul, OneDnnIsRefusedWhereItIsNotAvailable) {
  if (onednn_fp32_available()) {
    const ScopedFp32Matmul choice(Fp32Matmul::kOneDnn);
    EXPECT_EQ(fp32_matmul(), Fp32Matmul::kOneDnn);
    return;
  }
  try {
    set_fp32_matmul(Fp32Matmul::kOneDnn, "model.fp32_matmul");
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("model.fp32_matmul = \"onednn\""), std::string::npos);
  }
  EXPECT_THROW(onednn_mm(torch::ones({2, 2}), torch::ones({2, 2})), InputError);
}

TEST(Fp32Matmul, ProductsEqualLibTorchsIncludingTransposedOperands) {
  SKIP_WITHOUT_ONEDNN_FP32();
  const ScopedFp32Matmul choice(Fp32Matmul::kOneDnn);
  torch::manual_seed(5);
  const torch::Tensor a = torch::randn({96, 160});   // (n, k)
  const torch::Tensor b = torch::randn({160, 72});   // (k, m)
  const torch::Tensor bt = torch::randn({72, 160});  // (m, k): b as a transposed view
  const torch::Tensor at = torch::randn({160, 96});  // (k, n): a as a transposed view
  const torch::Tensor bias = torch::randn({72});     // (m)
  const auto exact = [](const torch::Tensor& x, const torch::Tensor& y) {
    return torch::mm(x.to(torch::kDouble), y.to(torch::kDouble));
  };
  expect_close(gemm(a, b), exact(a, b), 160, "a b");
  expect_close(gemm(a, bt.t()), exact(a, bt.t()), 160, "a b^T");
  expect_close(gemm(at.t(), b), exact(at.t(), b), 160, "a^T b");
  expect_close(onednn_mm(a, b), exact(a, b), 160, "onednn_mm");
  expect_close(gemm_bias(bias, a, b), exact(a, b) + bias.to(torch::kDouble), 160, "bias + a b");
  torch::Tensor sum = torch::randn({96, 72});
  const torch::Tensor before = sum.clone();
  gemm_into(sum, a, b, /*accumulate=*/true);
  expect_close(sum, before.to(torch::kDouble) + exact(a, b), 160, "accumulated");
  EXPECT_THROW(onednn_mm(a.to(torch::kDouble), b), InputError);
  EXPECT_THROW(onednn_mm(a, a), InputError);  // (96, 160) x (96, 160)
}

TEST(Fp32Matmul, Bf16BiasAndProductEqualAddmmsWhateverTheLayoutOfTheWeight) {
  // bf16 with a transposed contiguous weight, as the fused blocks pass it: on oneDNN's linear
  // where LibTorch has it (the bias added inside the product), else at::addmm; other layouts at
  // at::addmm. Either way bias + a W^T to within one rounding to bf16 of addmm's result (the two
  // were bitwise equal on an AMX Xeon).
  torch::manual_seed(11);
  const torch::Tensor a = torch::randn({70, 48}).to(torch::kBFloat16);
  const torch::Tensor weight = torch::randn({40, 48}).to(torch::kBFloat16);  // (out, in)
  const torch::Tensor bias = torch::randn({40}).to(torch::kBFloat16);
  const torch::NoGradGuard no_grad;
  const torch::Tensor expected = at::addmm(bias, a, weight.t()).to(torch::kDouble);  // (70, 40)
  const auto expect_bf16_close = [&](const torch::Tensor& actual, const std::string& what) {
    ASSERT_EQ(actual.scalar_type(), torch::kBFloat16) << what;
    ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
    const torch::Tensor error = (actual.to(torch::kDouble) - expected).abs();
    EXPECT_TRUE((error <= expected.abs() / 128).all().item<bool>()) << what;
    EXPECT_GT(expected.abs().max().item<double>(), 1.0) << what;
  };
  expect_bf16_close(gemm_bias(bias, a, weight.t()), "a transposed weight");
  expect_bf16_close(gemm_bias(bias, a, weight.t().contiguous()), "a (in, out) matrix");
  expect_bf16_close(gemm_bias(bias, a.t().contiguous().t(), weight.t()), "a transposed input");
  EXPECT_TRUE(torch::equal(gemm_bias(torch::Tensor(), a, weight.t()), at::mm(a, weight.t())));
}

TEST(Fp32Matmul, OnlyFloat32CpuProductsWithoutAutocastGoToOneDnn) {
  SKIP_WITHOUT_ONEDNN_FP32();
  const torch::Tensor f = torch::ones({4, 4});
  const torch::Tensor d = torch::ones({4, 4}, torch::kDouble);
  const torch::Tensor empty = torch::ones({0, 4});
  {
    const ScopedFp32Matmul choice(Fp32Matmul::kOneDnn);
    EXPECT_TRUE(fp32_products_on_onednn({&f, &f}));
    EXPECT_FALSE(fp32_products_on_onednn({&f, &d}));
    EXPECT_FALSE(fp32_products_on_onednn({&empty, &f}));
    // float64 and empty products are LibTorch's, with its results.
    EXPECT_TRUE(torch::equal(gemm(d, d), torch::mm(d, d)));
    EXPECT_EQ(gemm(empty, f).sizes(), (std::vector<int64_t>{0, 4}));
    const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    EXPECT_FALSE(fp32_products_on_onednn({&f, &f}));
  }
  const ScopedFp32Matmul choice(Fp32Matmul::kBlas);
  EXPECT_FALSE(fp32_products_on_onednn({&f, &f}));
}

/// Output and gradients of nn::linear with `mode`, the same inputs and upstream gradient each time.
struct LinearResult {
  torch::Tensor output;
  std::vector<torch::Tensor> grads;  ///< input, weight, bias (undefined without one)
  std::string node;                  ///< the output's autograd node
};

LinearResult run_linear(Fp32Matmul mode, bool with_bias, bool transposed_weight) {
  const ScopedFp32Matmul choice(mode);
  torch::manual_seed(6);
  const torch::Tensor input = torch::randn({3, 7, 48}).requires_grad_();  // (B, T, in)
  // The weight as a layer stores it (out, in), or (in, out) used through its transpose.
  const torch::Tensor stored =
      (transposed_weight ? torch::randn({48, 24}) : torch::randn({24, 48})).requires_grad_();
  const torch::Tensor weight = transposed_weight ? stored.t() : stored;  // (out, in)
  const torch::Tensor bias = torch::randn({24}).requires_grad_();        // (out)
  const torch::Tensor output =
      nn::linear(input, weight, with_bias ? bias : torch::Tensor());  // (B, T, out)
  output.backward(torch::randn({3, 7, 24}));
  LinearResult result{
      output.detach(), {input.grad(), stored.grad(), bias.grad()}, output.grad_fn()->name()};
  return result;
}

TEST(Fp32Matmul, LinearOnOneDnnGivesLibTorchsOutputAndGradients) {
  SKIP_WITHOUT_ONEDNN_FP32();
  for (const bool with_bias : {true, false}) {
    for (const bool transposed : {false, true}) {
      const std::string what = cat(with_bias ? "with" : "without", " a bias, weight ",
                                   transposed ? "(in, out) transposed" : "(out, in)");
      const LinearResult blas = run_linear(Fp32Matmul::kBlas, with_bias, transposed);
      const LinearResult onednn = run_linear(Fp32Matmul::kOneDnn, with_bias, transposed);
      EXPECT_EQ(blas.node.find("onednn_linear"), std::string::npos) << what << ": " << blas.node;
      EXPECT_NE(onednn.node.find("onednn_linear"), std::string::npos)
          << what << ": " << onednn.node;
      expect_close(onednn.output, blas.output, 48, "output " + what);
      expect_close(onednn.grads[0], blas.grads[0], 24, "input gradient " + what);
      expect_close(onednn.grads[1], blas.grads[1], 21, "weight gradient " + what);
      if (with_bias)
        expect_close(onednn.grads[2], blas.grads[2], 21, "bias gradient " + what);
      else
        EXPECT_FALSE(onednn.grads[2].defined()) << what;
    }
  }
}

TEST(Fp32Matmul, LinearComputesNoGradientForAFrozenWeightAndHasNoSecondDerivative) {
  SKIP_WITHOUT_ONEDNN_FP32();
  const ScopedFp32Matmul choice(Fp32Matmul::kOneDnn);
  const torch::Tensor input = torch::randn({5, 8}).requires_grad_();  // (N, in)
  const torch::Tensor frozen = torch::randn({3, 8});                  // (out, in)
  const torch::Tensor bias = torch::randn({3}).requires_grad_();      // (out)
  nn::linear(input, frozen, bias).sum().backward();
  EXPECT_FALSE(frozen.grad().defined());
  expect_close(input.grad(), frozen.sum(0).expand({5, 8}), 3, "input gradient");
  expect_close(bias.grad(), torch::full({3}, 5.0), 5, "bias gradient");
  // Nor does it keep the input for one: changing the input in place after forward is no error.
  const torch::Tensor changed = input * 1.0;  // (N, in), not a leaf
  const torch::Tensor y = nn::linear(changed, frozen, bias);
  changed.add_(1.0);
  EXPECT_NO_THROW(y.sum().backward());
  // A weight that trains keeps it, and autograd refuses the changed input.
  const torch::Tensor weight = frozen.clone().requires_grad_();
  const torch::Tensor kept = input * 1.0;
  const torch::Tensor z = nn::linear(kept, weight, bias);
  kept.add_(1.0);
  EXPECT_THROW(z.sum().backward(), c10::Error);
  // A 1-D input is one row.
  EXPECT_EQ(nn::linear(torch::randn({8}), frozen, bias).sizes(), (std::vector<int64_t>{3}));

  const torch::Tensor output = nn::linear(input, frozen, bias).sum();
  try {
    torch::autograd::grad({output}, {input}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "no error";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("model.fp32_matmul = \"blas\""), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace bigbatch::nn
