#include "bigbatch/nn/llama_ops.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigbatch/nn/fused_block.h"
#include "nn/scoped_setting.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

using bigbatch::testing::expect_contains;
using bigbatch::testing::logic_error_of;

struct ScopedBlockKernel : testing::ScopedSetting<BlockKernel> {
  explicit ScopedBlockKernel(BlockKernel kernel)
      : ScopedSetting(block_kernel, set_block_kernel, kernel) {}
};

/// max |a - b| / max(1, max |b|), in float64.
double relative_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor wide = b.to(torch::kFloat64);
  const double scale = std::max(1.0, wide.abs().max().item<double>());
  return (a.to(torch::kFloat64) - wide).abs().max().item<double>() / scale;
}

/// An operation on float32 inputs, run fused, then as the composite formula in float64 (the
/// exact values) and in float32 (the error float32 allows); every input's gradient is compared
/// against float64 within 4x the composite float32 error, or `floor`.
using Operation = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

void expect_fused_matches_float64(const Operation& op, const std::vector<torch::Tensor>& inputs,
                                  double floor) {
  const auto with_grad = [&](torch::ScalarType dtype) {
    std::vector<torch::Tensor> copies;
    for (const torch::Tensor& t : inputs)
      copies.push_back(t.detach().to(dtype).clone().requires_grad_());
    return copies;
  };
  const std::vector<torch::Tensor> fused = with_grad(torch::kFloat);
  const torch::Tensor y = op(fused);
  const torch::Tensor upstream = torch::randn(y.sizes());
  (y * upstream).sum().backward();

  const std::vector<torch::Tensor> exact = with_grad(torch::kFloat64);
  const torch::Tensor y64 = op(exact);
  (y64 * upstream.to(torch::kFloat64)).sum().backward();

  std::vector<torch::Tensor> composite;
  torch::Tensor y32;
  {
    const ScopedBlockKernel off(BlockKernel::kComposite);
    composite = with_grad(torch::kFloat);
    y32 = op(composite);
    (y32 * upstream).sum().backward();
  }
  const auto bound = [floor](const torch::Tensor& libtorch, const torch::Tensor& wide) {
    return std::max(floor, 4.0 * relative_diff(libtorch, wide));
  };
  EXPECT_EQ(y.sizes(), y64.sizes());
  EXPECT_LT(relative_diff(y, y64), bound(y32, y64));
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    ASSERT_TRUE(fused[i].grad().defined());
    EXPECT_LT(relative_diff(fused[i].grad(), exact[i].grad()),
              bound(composite[i].grad(), exact[i].grad()));
  }
}

TEST(LlamaOps, RmsNormMatchesTheCompositeFormulaInFloat64) {
  // 384 is the benchmark Llama's width, 7 a width no vector divides; 300 rows span several
  // chunks of the weight gradient's sums and a last chunk that is not full.
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{2, 5, 384}, {300, 7}, {3, 4, 64}}) {
    SCOPED_TRACE(::testing::PrintToString(sizes));
    torch::manual_seed(sizes.back());
    const torch::Tensor x = torch::randn(sizes) * 3.0 + 0.5;
    const torch::Tensor weight = torch::rand({sizes.back()}) + 0.5;
    expect_fused_matches_float64(
        [](const std::vector<torch::Tensor>& t) { return rms_norm(t[0], t[1], 1e-5); }, {x, weight},
        2e-6);
  }
}

TEST(LlamaOps, RotaryEmbeddingMatchesTheCompositeFormulaInFloat64) {
  for (const auto& [batch, time, heads, dim] :
       std::vector<std::array<int64_t, 4>>{{2, 9, 3, 64}, {3, 5, 2, 6}, {1, 130, 6, 64}}) {
    SCOPED_TRACE(std::to_string(heads) + " heads of " + std::to_string(dim));
    torch::manual_seed(dim + time);
    const torch::Tensor x = torch::randn({batch, time, heads * dim});
    const torch::Tensor angles = torch::rand({time, dim}) * 6.0;
    const torch::Tensor cos = angles.cos(), sin = angles.sin();
    expect_fused_matches_float64(
        [&](const std::vector<torch::Tensor>& t) {
          return rotary_embedding(t[0], cos.to(t[0].scalar_type()), sin.to(t[0].scalar_type()),
                                  heads);
        },
        {x}, 2e-6);
    const torch::Tensor y = rotary_embedding(x, cos, sin, heads);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{batch, heads, time, dim}));
    EXPECT_TRUE(y.is_contiguous());
  }
}

TEST(LlamaOps, SwigluMatchesTheCompositeFormulaInFloat64) {
  torch::manual_seed(11);
  // Wide gate values reach both ends of the sigmoid; 5000 values run on every thread.
  const torch::Tensor gate = torch::randn({5, 1000}) * 8.0;
  const torch::Tensor up = torch::randn({5, 1000});
  expect_fused_matches_float64(
      [](const std::vector<torch::Tensor>& t) { return swiglu(t[0], t[1]); }, {gate, up}, 2e-6);
}

/// The error of `fused` against `exact` is at most the composite formula's, or bf16's rounding of
/// the largest value (2^-8 relative) where the composite one happens to be smaller.
void expect_at_most_composite_error(const torch::Tensor& fused, const torch::Tensor& composite,
                                    const torch::Tensor& exact) {
  EXPECT_LE(relative_diff(fused, exact), std::max(relative_diff(composite, exact), 0.00390625));
}

TEST(LlamaOps, RunFusedOnBf16ValuesWithinTheCompositeFormulasError) {
  torch::manual_seed(19);
  const int64_t batch = 2, time = 33, heads = 3, dim = 64;
  const torch::Tensor angles = torch::rand({time, dim}) * 6.0;
  const torch::Tensor cos = angles.cos(), sin = angles.sin();  // float32, as the Llama's
  const torch::Tensor x = torch::randn({batch, time, heads * dim}).to(torch::kBFloat16);
  const torch::Tensor dy = torch::randn({batch, heads, time, dim});
  // Rotary embeddings: bf16 x with float32 cos and sin promote to float32, fused too.
  const auto rotary = [&](bool fused, torch::ScalarType dtype) {
    const ScopedBlockKernel kernel(fused ? BlockKernel::kAuto : BlockKernel::kComposite);
    const torch::Tensor input = x.detach().to(dtype).clone().requires_grad_();
    const torch::Tensor y =
        rotary_embedding(input, cos.to(dtype == torch::kBFloat16 ? torch::kFloat : dtype),
                         sin.to(dtype == torch::kBFloat16 ? torch::kFloat : dtype), heads);
    if (fused)
      expect_contains(y.grad_fn()->name(), {"RotaryFunction"});
    (y * dy.to(y.scalar_type())).sum().backward();
    return std::pair<torch::Tensor, torch::Tensor>{y.detach(), input.grad()};
  };
  const auto [y_fused, dx_fused] = rotary(true, torch::kBFloat16);
  const auto [y_composite, dx_composite] = rotary(false, torch::kBFloat16);
  const auto [y_exact, dx_exact] = rotary(false, torch::kFloat64);
  EXPECT_EQ(y_fused.scalar_type(), torch::kFloat);
  EXPECT_LE(relative_diff(y_fused, y_exact), 4.0 * relative_diff(y_composite, y_exact));
  EXPECT_EQ(dx_fused.scalar_type(), torch::kBFloat16);
  expect_at_most_composite_error(dx_fused, dx_composite, dx_exact);

  // SwiGLU: bf16 in and out, computed in float32 and rounded once.
  const torch::Tensor gate = (torch::randn({6, 700}) * 6.0).to(torch::kBFloat16);
  const torch::Tensor up = torch::randn({6, 700}).to(torch::kBFloat16);
  const torch::Tensor upstream = torch::randn({6, 700});
  const auto gated = [&](bool fused, torch::ScalarType dtype) {
    const ScopedBlockKernel kernel(fused ? BlockKernel::kAuto : BlockKernel::kComposite);
    const torch::Tensor g = gate.to(dtype).clone().requires_grad_();
    const torch::Tensor u = up.to(dtype).clone().requires_grad_();
    const torch::Tensor y = swiglu(g, u);
    if (fused)
      expect_contains(y.grad_fn()->name(), {"SwigluFunction"});
    y.backward(upstream.to(dtype));
    return std::vector<torch::Tensor>{y.detach(), g.grad(), u.grad()};
  };
  const std::vector<torch::Tensor> fused = gated(true, torch::kBFloat16);
  const std::vector<torch::Tensor> composite = gated(false, torch::kBFloat16);
  const std::vector<torch::Tensor> exact = gated(false, torch::kFloat64);
  for (size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(fused[i].scalar_type(), torch::kBFloat16);
    expect_at_most_composite_error(fused[i], composite[i], exact[i]);
  }
}

TEST(LlamaOps, RotaryRoundedToBf16IsTheFloat32ResultRoundedOnce) {
  torch::manual_seed(23);
  const int64_t batch = 2, time = 17, heads = 3, dim = 64;
  const torch::Tensor angles = torch::rand({time, dim}) * 6.0;
  const torch::Tensor cos = angles.cos(), sin = angles.sin();
  const torch::Tensor x = torch::randn({batch, time, heads * dim}).to(torch::kBFloat16);
  const torch::Tensor dy = torch::randn({batch, heads, time, dim}).to(torch::kBFloat16);
  for (const BlockKernel kernel : {BlockKernel::kAuto, BlockKernel::kComposite}) {
    SCOPED_TRACE(to_string(kernel));
    const ScopedBlockKernel scoped(kernel);
    // Through float32 (y and dy widened), then rounded as a bf16 product would round y.
    const torch::Tensor x32 = x.clone().requires_grad_();
    const torch::Tensor y32 = rotary_embedding(x32, cos, sin, heads);
    (y32 * dy.to(torch::kFloat)).sum().backward();
    const torch::Tensor x16 = x.clone().requires_grad_();
    const torch::Tensor y16 = rotary_embedding(x16, cos, sin, heads, /*rounded=*/true);
    EXPECT_EQ(y16.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(y16.equal(y32.to(torch::kBFloat16)));
    y16.backward(dy);
    EXPECT_EQ(x16.grad().scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(x16.grad().equal(x32.grad()));
    // A float32 x has nothing to round to: rounded changes nothing.
    EXPECT_EQ(rotary_embedding(x.to(torch::kFloat), cos, sin, heads, true).scalar_type(),
              torch::kFloat);
  }
}

TEST(LlamaOps, ResidualAddIsAtAddsSumsAndGradients) {
  torch::manual_seed(29);
  const torch::Tensor residual = torch::randn({3, 5, 40});
  const torch::Tensor branch = torch::randn({3, 5, 40}).to(torch::kBFloat16);
  const torch::Tensor dy = torch::randn({3, 5, 40});
  const auto add = [&](BlockKernel kernel) {
    const ScopedBlockKernel scoped(kernel);
    const torch::Tensor r = residual.clone().requires_grad_();
    const torch::Tensor b = branch.clone().requires_grad_();
    const torch::Tensor y = residual_add(r * 1.0, b * 1.0);
    if (kernel == BlockKernel::kAuto)
      expect_contains(y.grad_fn()->name(), {"ResidualAddFunction"});
    y.backward(dy);
    return std::vector<torch::Tensor>{y.detach(), r.grad(), b.grad()};
  };
  const std::vector<torch::Tensor> fused = add(BlockKernel::kAuto);
  const std::vector<torch::Tensor> composite = add(BlockKernel::kComposite);
  EXPECT_EQ(fused[0].scalar_type(), torch::kFloat);
  EXPECT_EQ(fused[2].scalar_type(), torch::kBFloat16);
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_TRUE(fused[i].equal(composite[i])) << i;
  // Anything else is at::add: a non-contiguous branch, two float32 tensors.
  EXPECT_TRUE(residual_add(residual, branch.transpose(0, 1).contiguous().transpose(0, 1))
                  .equal(residual + branch));
  EXPECT_TRUE(residual_add(residual, residual).equal(2 * residual));
}

TEST(LlamaOps, Bf16SwigluIsTheFloat32SwigluRoundedOnceAtEveryGateValue) {
  // Every bf16 bit pattern as the gate (NaN, infinities and subnormals included): the bf16
  // kernels look SiLU and its slope up in tables, the float32 ones compute them.
  const torch::Tensor gate =
      torch::arange(int64_t(1) << 16, torch::kInt).to(torch::kShort).view(torch::kBFloat16);
  const torch::Tensor up = torch::randn({1 << 16}).to(torch::kBFloat16);
  const torch::Tensor upstream = torch::randn({1 << 16}).to(torch::kBFloat16);
  const auto gated = [&](torch::ScalarType dtype) {
    const torch::Tensor g = gate.to(dtype).clone().requires_grad_();
    const torch::Tensor u = up.to(dtype).clone().requires_grad_();
    const torch::Tensor y = swiglu(g, u);
    expect_contains(y.grad_fn()->name(), {"SwigluFunction"});
    y.backward(upstream.to(dtype));
    return std::vector<torch::Tensor>{y.detach(), g.grad(), u.grad()};
  };
  const std::vector<torch::Tensor> narrow = gated(torch::kBFloat16);
  const std::vector<torch::Tensor> wide = gated(torch::kFloat);
  for (size_t i = 0; i < narrow.size(); ++i) {
    SCOPED_TRACE(i);
    const torch::Tensor expected = wide[i].to(torch::kBFloat16);
    const torch::Tensor both_nan = narrow[i].isnan() & expected.isnan();
    EXPECT_TRUE(
        torch::equal(narrow[i].masked_fill(both_nan, 0), expected.masked_fill(both_nan, 0)));
    EXPECT_TRUE(torch::equal(narrow[i].isnan(), expected.isnan()));
  }
}

TEST(LlamaOps, SwigluKeepsNanAndTheSigmoidsEnds) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const torch::Tensor gate = torch::tensor({nan, -200.0f, -90.0f, 0.0f, 90.0f, 200.0f, inf});
  const torch::Tensor up = torch::full({7}, 2.0f);
  const torch::Tensor y = swiglu(gate, up);
  EXPECT_TRUE(std::isnan(y[0].item<float>()));
  EXPECT_LT(std::abs(y[1].item<float>()), 1e-30f);
  EXPECT_LT(std::abs(y[2].item<float>()), 1e-30f);
  EXPECT_EQ(y[3].item<float>(), 0.0f);
  EXPECT_EQ(y[4].item<float>(), 180.0f);
  EXPECT_EQ(y[5].item<float>(), 400.0f);
  EXPECT_EQ(y[6].item<float>(), inf);
  // The same in bf16, whose rounding keeps NaN a NaN and the ends as they are.
  const torch::Tensor narrow = swiglu(gate.to(torch::kBFloat16), up.to(torch::kBFloat16));
  EXPECT_TRUE(std::isnan(narrow[0].item<float>()));
  EXPECT_EQ(narrow.slice(0, 1).to(torch::kFloat).abs().lt(1e-30).sum().item<int64_t>(), 3);
  EXPECT_EQ(narrow[4].item<float>(), 180.0f);
  EXPECT_EQ(narrow[5].item<float>(), 400.0f);
  EXPECT_EQ(narrow[6].item<float>(), inf);
}

TEST(LlamaOps, AreDeterministicAndIndependentOfTheThreadCount) {
  torch::manual_seed(13);
  const torch::Tensor x = (torch::randn({4, 128, 384}) * 2.0).requires_grad_();  // 196K values
  const torch::Tensor weight = (torch::rand({384}) + 0.5).requires_grad_();
  const torch::Tensor angles = torch::rand({128, 64}) * 6.0;
  const torch::Tensor upstream = torch::randn({4, 6, 128, 64});
  const auto run = [&] {
    x.mutable_grad() = torch::Tensor();
    weight.mutable_grad() = torch::Tensor();
    const torch::Tensor normed = rms_norm(x, weight, 1e-5);
    const torch::Tensor gated = swiglu(normed, normed.flip(-1));
    const torch::Tensor y = rotary_embedding(gated, angles.cos(), angles.sin(), 6);
    (y * upstream).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), x.grad().clone(), weight.grad().clone()};
  };
  const std::vector<torch::Tensor> first = run(), again = run();
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const std::vector<torch::Tensor> one = run();
  at::set_num_threads(threads);
  for (size_t i = 0; i < first.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(torch::equal(first[i], again[i]));
    EXPECT_TRUE(torch::equal(first[i], one[i]));
  }
}

TEST(LlamaOps, RunTheCompositeFormulaOutsideCpuFloat32OrWhenTold) {
  torch::manual_seed(17);
  const torch::Tensor x = torch::randn({3, 8}).requires_grad_();
  const torch::Tensor weight = torch::rand({8}) + 0.5;
  EXPECT_TRUE(use_fused_llama_ops({&x, &weight}));
  const torch::Tensor x64 = x.to(torch::kFloat64);
  EXPECT_FALSE(use_fused_llama_ops({&x64, &weight}));
  const torch::Tensor bf16 = x.to(torch::kBFloat16);
  EXPECT_FALSE(use_fused_llama_ops({&bf16}));
  expect_contains(rms_norm(x, weight, 1e-5).grad_fn()->name(), {"RmsNormFunction"});
  expect_contains(swiglu(x, x).grad_fn()->name(), {"SwigluFunction"});
  const ScopedBlockKernel composite(BlockKernel::kComposite);
  EXPECT_FALSE(use_fused_llama_ops({&x, &weight}));
  const torch::Tensor expected =
      weight * (x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-5));
  EXPECT_TRUE(torch::equal(rms_norm(x, weight, 1e-5), expected));
  EXPECT_TRUE(torch::equal(swiglu(x, x), torch::silu(x) * x));
}

TEST(LlamaOps, BackwardWithCreateGraphThrows) {
  const torch::Tensor x = torch::randn({4, 6}).requires_grad_();
  const std::vector<std::pair<std::string, torch::Tensor>> outputs = {
      {"rms_norm", rms_norm(x, torch::ones({6}), 1e-5)},
      {"swiglu", swiglu(x, x)},
      {"rotary_embedding",
       rotary_embedding(x.view({1, 4, 6}), torch::ones({4, 6}), torch::zeros({4, 6}), 1)}};
  for (const auto& [name, y] : outputs) {
    SCOPED_TRACE(name);
    expect_contains(logic_error_of([&] {
                      torch::autograd::grad({y.square().sum()}, {x}, {}, /*retain_graph=*/true,
                                            /*create_graph=*/true);
                    }),
                    {"nn::" + name, "no second derivative", "model.block_kernel = \"composite\""});
  }
}

TEST(LlamaOps, RejectShapesThatDoNotFit) {
  expect_contains(logic_error_of([] {
                    rms_norm(torch::randn({2, 5}), torch::ones({4}), 1e-5);
                  }),
                  {"rms_norm: weight [4]", "x [2, 5]"});
  expect_contains(
      logic_error_of([] {
        rotary_embedding(torch::randn({1, 3, 10}), torch::ones({3, 5}), torch::ones({3, 5}), 2);
      }),
      {"2 heads of an even size", "[1, 3, 10]"});
  expect_contains(
      logic_error_of([] {
        rotary_embedding(torch::randn({1, 3, 8}), torch::ones({4, 4}), torch::ones({4, 4}), 2);
      }),
      {"(T, D) = (3, 4)", "[4, 4]"});
  expect_contains(logic_error_of([] {
                    rotary_embedding(torch::randn({1, 3, 8}), torch::ones({3, 4}).requires_grad_(),
                                     torch::ones({3, 4}), 2);
                  }),
                  {"no gradient"});
  expect_contains(logic_error_of([] {
                    swiglu(torch::randn({2, 3}), torch::randn({3, 2}));
                  }),
                  {"same sizes", "[2, 3]", "[3, 2]"});
}

}  // namespace
}  // namespace bigbatch::nn
