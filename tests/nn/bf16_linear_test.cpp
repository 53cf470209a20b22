// The Linear under CPU bf16 autocast on the native kernels as one node: the values autocast and
// autograd compute over several windows of micro-batches, weight casts kept per window and made
// again when the weight changes, one cast of an input read twice, gradients into .grad directly.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_linear.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/row_split_products.h"
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

/// The end of a window: each parameter's accumulated gradient into the trace (an empty stand-in
/// where it took none, as an unused output's parameters), then a sign step, as an optimizer step
/// changes the weights in place (their casts are made again), and the gradients cleared.
void step(const std::vector<torch::Tensor>& parameters, Trace& trace) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor parameter : parameters) {
    if (!parameter.grad().defined()) {
      trace.parameter_grads.push_back(torch::zeros({0}));
      continue;
    }
    trace.parameter_grads.push_back(parameter.grad().clone());
    parameter.sub_(0.1 * parameter.grad().sign());
    parameter.mutable_grad() = torch::Tensor();
  }
}

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
    step(p.parameters(), trace);
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
  // Two threads, so that a node's two gradient products may run side by side.
  const testing::ScopedSetting<int> threads(at::get_num_threads, at::set_num_threads, 2);
  const testing::ScopedSetting<RowSplit> split(row_split, set_row_split, RowSplit::kAuto);
  const RowSplitCounts before = row_split_counts();
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
  EXPECT_GT(row_split_counts().groups_tried, before.groups_tried);  // the gradients' products
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

/// Three products of one input as a Llama's q, k and v, with biases as Qwen2's (or without).
struct ThreeProducts {
  std::vector<torch::Tensor> weights, biases;

  explicit ThreeProducts(bool with_biases) {
    torch::manual_seed(17);
    for (const int64_t out : {48, 16, 16}) {
      weights.push_back(torch::randn({out, 48}).requires_grad_());  // (out, in)
      if (with_biases)
        biases.push_back(torch::randn({out}).requires_grad_());  // (out)
    }
  }
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> all = weights;
    all.insert(all.end(), biases.begin(), biases.end());
    return all;
  }
};

/// Windows of 3 micro-batches through the three products, as one node (`grouped`) or one
/// nn::linear each, the second output's gradient left out where `skip_second`; as run_windows.
Trace run_grouped_windows(bool grouped, bool with_biases, bool skip_second) {
  const ScopedKernels kernels(BlockKernel::kAuto);
  ThreeProducts p(with_biases);
  Trace trace;
  torch::manual_seed(5);
  for (int window = 0; window < 3; ++window) {
    {
      const WeightCopyScope copies;
      for (int micro = 0; micro < 3; ++micro) {
        const torch::Tensor leaf = torch::randn({2, 7, 48}).requires_grad_();  // (B, T, in)
        const torch::Tensor input = leaf * 1.0;
        std::vector<torch::Tensor> outputs;  // (B, T, out) each
        {
          const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
          if (grouped) {
            outputs = native_bf16_linears(input, p.weights, p.biases);
            EXPECT_NE(outputs[0].grad_fn()->name().find("Bf16LinearsFunction"), std::string::npos);
          } else {
            for (size_t j = 0; j < p.weights.size(); ++j)
              outputs.push_back(
                  nn::linear(input, p.weights[j], with_biases ? p.biases[j] : torch::Tensor()));
          }
        }
        std::vector<torch::Tensor> used, grads;
        for (size_t j = 0; j < outputs.size(); ++j) {
          const torch::Tensor grad = torch::randn(outputs[j].sizes()).to(torch::kBFloat16);
          if (skip_second && j == 1)
            continue;
          used.push_back(outputs[j]);
          grads.push_back(grad);
        }
        {
          const DirectWeightGradScope direct;
          torch::autograd::backward(used, grads);
        }
        for (const torch::Tensor& output : outputs)
          trace.outputs.push_back(output.detach());
        trace.input_grads.push_back(leaf.grad());
      }
    }
    step(p.parameters(), trace);
  }
  return trace;
}

TEST(NativeBf16Linears, AreBitwiseSeparateNodesOverManyWindows) {
  // Two threads, so that the group's products may run side by side (nn/row_split_products).
  const testing::ScopedSetting<int> threads(at::get_num_threads, at::set_num_threads, 2);
  const testing::ScopedSetting<RowSplit> split(row_split, set_row_split, RowSplit::kAuto);
  const RowSplitCounts before = row_split_counts();
  for (const bool with_biases : {false, true}) {
    for (const bool skip_second : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "biases " << with_biases << ", second output unused " << skip_second);
      const Trace grouped = run_grouped_windows(true, with_biases, skip_second);
      const Trace separate = run_grouped_windows(false, with_biases, skip_second);
      ASSERT_EQ(grouped.outputs.size(), 27u);
      for (size_t i = 0; i < grouped.outputs.size(); ++i)
        EXPECT_TRUE(grouped.outputs[i].equal(separate.outputs[i])) << "output " << i;
      ASSERT_EQ(grouped.input_grads.size(), 9u);
      for (size_t i = 0; i < grouped.input_grads.size(); ++i) {
        EXPECT_EQ(grouped.input_grads[i].scalar_type(), torch::kFloat);
        EXPECT_TRUE(grouped.input_grads[i].equal(separate.input_grads[i])) << "input grad " << i;
      }
      ASSERT_EQ(grouped.parameter_grads.size(), separate.parameter_grads.size());
      for (size_t i = 0; i < grouped.parameter_grads.size(); ++i) {
        EXPECT_TRUE(grouped.parameter_grads[i].equal(separate.parameter_grads[i]))
            << "parameter gradient " << i;
      }
    }
  }
  EXPECT_GT(row_split_counts().groups_tried, before.groups_tried);  // the groups were tried
}

TEST(NativeBf16Linears, TakeFrozenWeightsAndApplyOnlyToWholeGroups) {
  const ScopedKernels kernels(BlockKernel::kAuto);
  torch::manual_seed(19);
  const std::vector<torch::Tensor> frozen = {torch::randn({24, 48}), torch::randn({8, 48})};
  const torch::Tensor x = torch::randn({5, 48});
  const auto pass = [&](bool grouped) {
    const torch::Tensor input = x.clone().requires_grad_();
    std::vector<torch::Tensor> outputs;
    {
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      if (grouped) {
        outputs = native_bf16_linears(input * 1.0, frozen, {});
      } else {
        const torch::Tensor activation = input * 1.0;
        outputs = {nn::linear(activation, frozen[0]), nn::linear(activation, frozen[1])};
      }
    }
    torch::autograd::backward(outputs, {torch::ones({5, 24}).to(torch::kBFloat16),
                                        torch::ones({5, 8}).to(torch::kBFloat16)});
    EXPECT_FALSE(frozen[0].grad().defined());
    return std::pair<torch::Tensor, torch::Tensor>{outputs[1].detach(), input.grad()};
  };
  const auto [y, dx] = pass(true);
  const auto [expected_y, expected_dx] = pass(false);
  EXPECT_TRUE(y.equal(expected_y));
  EXPECT_TRUE(dx.equal(expected_dx));

  const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
  EXPECT_TRUE(native_bf16_linears_apply(x, frozen, {}));
  EXPECT_FALSE(native_bf16_linears_apply(x, {}, {}));                        // no weight
  EXPECT_FALSE(native_bf16_linears_apply(x, frozen, {torch::zeros({24})}));  // one bias of two
  EXPECT_FALSE(native_bf16_linears_apply(x, {torch::randn({4, 47})}, {}));   // a wrong width
  EXPECT_THROW(native_bf16_linears(x, frozen, {torch::zeros({24})}), std::logic_error);
}

}  // namespace
}  // namespace bigbatch::nn
