// The Linear under CPU bf16 autocast on the native kernels as one node: the values autocast and
// autograd compute over several windows of micro-batches, weight casts kept per window and made
// again when the weight changes, one cast of an input read twice, gradients into .grad directly.
#include <gtest/gtest.h>

#include <string>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_linear.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/weight_copies.h"
#include "nn/scoped_setting.h"

namespace bigbatch::nn {
namespace {

/// The bf16 product kernels and the block kernels for one test.
struct ScopedKernels {
  testing::ScopedSetting<Bf16Matmul> matmul{bf16_matmul, set_bf16_matmul, Bf16Matmul::kNative};
  testing::ScopedSetting<BlockKernel> block;
  explicit ScopedKernels(BlockKernel kernel) : block(block_kernel, set_block_kernel, kernel) {}
};

/// Parameters of two products that read the same input, as a Llama's gate and up do.
struct TwoProducts {
  torch::Tensor first_weight, first_bias, second_weight;

  TwoProducts() {
    torch::manual_seed(11);
    first_weight = torch::randn({40, 48}).requires_grad_();  // (out, in)
    first_bias = torch::randn({40}).requires_grad_();        // (out)
    second_weight = torch::randn({24, 48}).requires_grad_();
  }
  std::vector<torch::Tensor> parameters() const {
    return {first_weight, first_bias, second_weight};
  }
};

/// What a few windows of micro-batches computed: every output, every input gradient, and the
/// parameters' accumulated gradients at the end of each window.
struct Trace {
  std::vector<torch::Tensor> outputs, input_grads, parameter_grads;
};

/// Windows of 3 micro-batches with `kernel`, as the engine runs them (a WeightCopyScope around
/// each window's passes, a DirectWeightGradScope around each backward), the weights changed in
/// place between windows as an optimizer step changes them.
Trace run_windows(BlockKernel kernel) {
  const ScopedKernels kernels(kernel);
  TwoProducts p;
  Trace trace;
  torch::manual_seed(5);
  for (int window = 0; window < 3; ++window) {
    {
      const WeightCopyScope copies;
      for (int micro = 0; micro < 3; ++micro) {
        // An activation, not a leaf: autocast casts it once per product, as this node does
        // (a leaf's cast autocast keeps, and sums its gradients in bf16).
        const torch::Tensor leaf = torch::randn({2, 7, 48}).requires_grad_();  // (B, T, in)
        const torch::Tensor input = leaf * 1.0;
        torch::Tensor first, second;
        {
          const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
          first = nn::linear(input, p.first_weight, p.first_bias);  // (B, T, 40)
          second = nn::linear(input, p.second_weight);              // (B, T, 24)
        }
        const torch::Tensor g1 = torch::randn({2, 7, 40}).to(torch::kBFloat16);
        const torch::Tensor g2 = torch::randn({2, 7, 24}).to(torch::kBFloat16);
        {
          const DirectWeightGradScope direct;
          torch::autograd::backward({first, second}, {g1, g2});
        }
        trace.outputs.insert(trace.outputs.end(), {first.detach(), second.detach()});
        trace.input_grads.push_back(leaf.grad());
      }
    }
    torch::NoGradGuard no_grad;
    for (torch::Tensor& parameter : p.parameters()) {
      trace.parameter_grads.push_back(parameter.grad().clone());
      parameter.sub_(0.1 * parameter.grad().sign());  // weights change: casts are made again
      parameter.mutable_grad() = torch::Tensor();
    }
  }
  return trace;
}

/// `actual` holds `expected`'s values but for the order of sums inside a bf16 product: at most 2%
/// of the elements differ, none by more than 2 bf16 ulps of the tensor's largest magnitude.
void expect_close_bf16(const torch::Tensor& actual, const torch::Tensor& expected,
                       const std::string& what) {
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const torch::Tensor a = actual.to(torch::kDouble), e = expected.to(torch::kDouble);
  EXPECT_LT(a.ne(e).to(torch::kDouble).mean().item<double>(), 0.02) << what;
  const double scale = e.abs().max().item<double>();
  EXPECT_GT(scale, 0.0) << what;
  EXPECT_LE((a - e).abs().max().item<double>(), 2.0 * scale / 128.0) << what;
}

TEST(NativeBf16Linear, ComputesAutocastsValuesOverManyWindows) {
  const Trace fused = run_windows(BlockKernel::kAuto);
  const Trace composite = run_windows(BlockKernel::kComposite);  // autocast's at::linear
  ASSERT_EQ(fused.outputs.size(), 18u);
  for (size_t i = 0; i < fused.outputs.size(); ++i) {
    EXPECT_EQ(fused.outputs[i].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(fused.outputs[i].equal(composite.outputs[i])) << "output " << i;
  }
  for (size_t i = 0; i < fused.input_grads.size(); ++i) {
    EXPECT_EQ(fused.input_grads[i].scalar_type(), torch::kFloat);
    EXPECT_TRUE(fused.input_grads[i].equal(composite.input_grads[i])) << "input gradient " << i;
  }
  ASSERT_EQ(fused.parameter_grads.size(), 9u);
  for (size_t i = 0; i < fused.parameter_grads.size(); ++i) {
    EXPECT_EQ(fused.parameter_grads[i].scalar_type(), torch::kFloat);
    expect_close_bf16(fused.parameter_grads[i], composite.parameter_grads[i],
                      "parameter gradient " + std::to_string(i));
  }
}

TEST(NativeBf16Linear, AddsWeightGradientsIntoGradOnlyInsideTheScope) {
  const ScopedKernels kernels(BlockKernel::kAuto);
  TwoProducts p;
  const torch::Tensor input = torch::randn({3, 48});  // (N, in)
  const auto pass = [&](bool direct) {
    torch::Tensor y;
    {
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      y = nn::linear(input, p.second_weight);  // (N, 24)
    }
    const int64_t before = direct_weight_grads_added();
    if (direct) {
      const DirectWeightGradScope scope;
      y.to(torch::kFloat).sum().backward();
    } else {
      y.to(torch::kFloat).sum().backward();
    }
    return direct_weight_grads_added() - before;
  };
  EXPECT_EQ(pass(/*direct=*/false), 0);
  const torch::Tensor once = p.second_weight.grad().clone();
  EXPECT_EQ(pass(/*direct=*/true), 1);
  EXPECT_TRUE(p.second_weight.grad().equal(2 * once));  // the same bf16 gradient, added twice
}

TEST(NativeBf16Linear, TakesFrozenWeightsInFloat32OrStoredInBf16) {
  torch::manual_seed(13);
  const torch::Tensor weight = torch::randn({24, 48});  // (out, in), frozen
  const torch::Tensor dy = torch::randn({2, 5, 24}).to(torch::kBFloat16);
  const torch::Tensor x = torch::randn({2, 5, 48});
  const auto pass = [&](BlockKernel kernel, const torch::Tensor& w) {
    const ScopedKernels kernels(kernel);
    const torch::Tensor input = x.clone().requires_grad_();
    torch::Tensor y;
    {
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      y = nn::linear(input * 1.0, w);  // (B, T, out)
    }
    y.backward(dy);
    EXPECT_FALSE(w.grad().defined());
    return std::pair<torch::Tensor, torch::Tensor>{y.detach(), input.grad()};
  };
  const auto [y, dx] = pass(BlockKernel::kComposite, weight);
  for (const torch::Tensor& w : {weight, weight.to(torch::kBFloat16)}) {
    const auto [fused_y, fused_dx] = pass(BlockKernel::kAuto, w);
    EXPECT_TRUE(fused_y.equal(y)) << w.scalar_type();
    EXPECT_TRUE(fused_dx.equal(dx)) << w.scalar_type();
  }
}

TEST(NativeBf16Linear, CastsAnInputAgainAfterItChangesInPlace) {
  const ScopedKernels kernels(BlockKernel::kAuto);
  TwoProducts p;
  const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
  const torch::Tensor input = torch::randn({4, 48});  // (N, in)
  // The first product's node keeps the input's cast alive, where a second would find it.
  const torch::Tensor before = nn::linear(input, p.second_weight);
  ASSERT_TRUE(before.requires_grad());
  input.mul_(2);  // exact in bf16: the product doubles exactly
  EXPECT_TRUE(nn::linear(input, p.second_weight).equal(2 * before));
}

TEST(NativeBf16Linear, RefusesASecondDerivativeAndStepsAsideForTheComposite) {
  TwoProducts p;
  const torch::Tensor input = torch::randn({4, 48}).requires_grad_();  // (N, in)
  const auto first_derivative = [&] {
    torch::Tensor y;
    {
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      y = nn::linear(input, p.second_weight);  // (N, 24)
    }
    return torch::autograd::grad({y.to(torch::kFloat).pow(2).sum()}, {p.second_weight}, {},
                                 /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  {
    const ScopedKernels kernels(BlockKernel::kAuto);
    try {
      first_derivative();
      FAIL() << "no error";
    } catch (const std::exception& error) {
      EXPECT_NE(std::string(error.what()).find("no second derivative"), std::string::npos);
      EXPECT_NE(std::string(error.what()).find("model.block_kernel"), std::string::npos);
    }
  }
  const ScopedKernels kernels(BlockKernel::kComposite);
  EXPECT_TRUE(first_derivative().requires_grad());
}

TEST(NativeBf16Linear, AppliesOnlyToCpuBf16AutocastOnTheNativeKernels) {
  const torch::Tensor input = torch::randn({4, 48});
  const torch::Tensor weight = torch::randn({24, 48});
  {
    const ScopedKernels kernels(BlockKernel::kAuto);
    EXPECT_FALSE(native_bf16_linear_applies(input, weight, {}));  // autocast off
    const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    EXPECT_TRUE(native_bf16_linear_applies(input, weight, {}));
    EXPECT_TRUE(native_bf16_linear_applies(input, weight.to(torch::kBFloat16), {}));
    EXPECT_FALSE(native_bf16_linear_applies(input.to(torch::kDouble), weight, {}));
    EXPECT_FALSE(native_bf16_linear_applies(input, weight, torch::zeros({25})));
    EXPECT_FALSE(native_bf16_linear_applies(input.view({-1}), weight.view({-1, 1}), {}));
    EXPECT_THROW(native_bf16_linear(input, weight.t(), {}), std::logic_error);
    const testing::ScopedSetting<Bf16Matmul> fp32(bf16_matmul, set_bf16_matmul, Bf16Matmul::kFp32);
    EXPECT_FALSE(native_bf16_linear_applies(input, weight, {}));
  }
  const ScopedKernels kernels(BlockKernel::kComposite);
  const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
  EXPECT_FALSE(native_bf16_linear_applies(input, weight, {}));
}

}  // namespace
}  // namespace bigbatch::nn
