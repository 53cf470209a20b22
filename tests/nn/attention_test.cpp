// Attention: the fused and the composite kernels compute the same outputs and gradients under
// every kind of mask (sliding windows included), the composite one is softmax(q k^T / sqrt(D) +
// mask) v as written out (with soft-capped scores too), and the choice of kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/bf16_attention.h"
#include "bigbatch/nn/precision.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

/// Sets the process-wide choice for one test and puts back the previous one.
class ScopedAttentionKernel {
 public:
  explicit ScopedAttentionKernel(AttentionKernel kernel) : previous_(attention_kernel()) {
    set_attention_kernel(kernel, "test");
  }
  ~ScopedAttentionKernel() { set_attention_kernel(previous_, "test"); }
  ScopedAttentionKernel(const ScopedAttentionKernel&) = delete;
  ScopedAttentionKernel& operator=(const ScopedAttentionKernel&) = delete;

 private:
  AttentionKernel previous_;
};

constexpr int64_t kBatch = 3, kHeads = 2, kTime = 5, kHeadDim = 4;

/// The output and the gradients of q, k and v of one attention, in float64.
struct AttentionResult {
  torch::Tensor output, dq, dk, dv;
};

/// (B, S) bool: the last two keys of the second sequence and the last one of the third are
/// padding; the first is unpadded.
torch::Tensor example_padding() {
  torch::Tensor padding = torch::zeros({kBatch, kTime}, torch::kBool);
  padding.index_put_({1, torch::indexing::Slice(kTime - 2)}, true);
  padding.index_put_({2, kTime - 1}, true);
  return padding;
}

/// A mask and what it is called in a failure message.
struct NamedMask {
  const char* what;
  AttentionMask mask;
};

/// No mask, causal, padding (example_padding()), both, a causal sliding window of 2 keys and a
/// two-sided one (keys less than 2 away), each alone and with padding.
std::vector<NamedMask> every_mask() {
  return {{"no mask", {false, {}}},
          {"causal", {true, {}}},
          {"padding", {false, example_padding()}},
          {"causal and padding", {true, example_padding()}},
          {"causal window of 2", {true, {}, 2}},
          {"causal window of 2 and padding", {true, example_padding(), 2}},
          {"window of 2 each way", {false, {}, 2}},
          {"window of 2 each way and padding", {false, example_padding(), 2}}};
}

AttentionResult run(AttentionKernel kernel, const AttentionMask& mask, double softcap = 0.0) {
  const ScopedAttentionKernel choice(kernel);
  torch::manual_seed(11);
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  // Strided like the heads split from a joint projection: (B, T, H, D) viewed as (B, H, T, D).
  const torch::Tensor q = torch::randn({kBatch, kTime, kHeads, kHeadDim}, options).requires_grad_();
  const torch::Tensor k = torch::randn({kBatch, kTime, kHeads, kHeadDim}, options).requires_grad_();
  const torch::Tensor v = torch::randn({kBatch, kTime, kHeads, kHeadDim}, options).requires_grad_();
  const torch::Tensor output =
      scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                   /*dropout=*/0.0, /*training=*/true, softcap);  // (B, H, T, D)
  output.backward(torch::randn(output.sizes(), options));
  return {output.detach(), q.grad(), k.grad(), v.grad()};
}

void expect_same(const AttentionResult& a, const AttentionResult& b, const std::string& what) {
  EXPECT_LE(testing::relative_difference(a.output, b.output), 1e-14) << what << " output";
  EXPECT_LE(testing::relative_difference(a.dq, b.dq), 1e-13) << what << " dq";
  EXPECT_LE(testing::relative_difference(a.dk, b.dk), 1e-13) << what << " dk";
  EXPECT_LE(testing::relative_difference(a.dv, b.dv), 1e-13) << what << " dv";
}

/// softmax(q k^T / sqrt(D), soft-capped at `softcap` > 0, -inf where `blocked`) v, written out in
/// float64 on run()'s q, k and v. blocked (T, S) or (B, 1, T, S) bool -> (B, H, T, D)
torch::Tensor written_out(const torch::Tensor& blocked, double softcap = 0.0) {
  torch::manual_seed(11);
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor q = torch::randn({kBatch, kTime, kHeads, kHeadDim}, options).transpose(1, 2);
  const torch::Tensor k = torch::randn({kBatch, kTime, kHeads, kHeadDim}, options).transpose(1, 2);
  const torch::Tensor v = torch::randn({kBatch, kTime, kHeads, kHeadDim}, options).transpose(1, 2);
  const torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(kHeadDim));
  const torch::Tensor capped = softcap > 0 ? torch::tanh(scores / softcap) * softcap : scores;
  return torch::matmul(
      torch::softmax(capped.masked_fill(blocked, -std::numeric_limits<double>::infinity()), -1), v);
}

TEST(Attention, FusedAndCompositeAgreeUnderEveryMask) {
  if (!fused_attention_available())
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused attention (2.0 and later do)";
  for (const NamedMask& c : every_mask())
    expect_same(run(AttentionKernel::kFused, c.mask), run(AttentionKernel::kComposite, c.mask),
                c.what);
}

TEST(Attention, CompositeIsTheMaskedSoftmaxWrittenOut) {
  const AttentionMask mask{true, example_padding()};
  const AttentionResult composite = run(AttentionKernel::kComposite, mask);
  const torch::Tensor blocked =
      torch::ones({kTime, kTime}, torch::kBool)
          .triu(1)
          .logical_or(example_padding().view({kBatch, 1, 1, kTime}));  // (B, 1, T, S)
  EXPECT_LE(testing::relative_difference(composite.output, written_out(blocked)), 1e-14);
  // The blocked keys get no gradient from any query.
  const torch::Tensor dk = composite.dk.transpose(1, 2);  // (B, H, S, D)
  EXPECT_EQ(dk.index({1, torch::indexing::Slice(), torch::indexing::Slice(kTime - 2)})
                .abs()
                .max()
                .item<double>(),
            0.0);
  EXPECT_GT(dk.index({0}).abs().max().item<double>(), 0.0);
}

TEST(Attention, SlidingWindowAndSoftCappedScoresAreWrittenOut) {
  // Query t sees keys t - 1 and t (a window of 2); scores capped at 0.5 before the mask.
  const AttentionMask mask{true, {}, 2};
  const torch::Tensor ones = torch::ones({kTime, kTime}, torch::kBool);
  const torch::Tensor blocked = ones.triu(1).logical_or(ones.tril(-2));  // (T, S)
  for (const double softcap : {0.0, 0.5}) {
    const torch::Tensor expected = written_out(blocked, softcap);
    for (const AttentionKernel kernel : {AttentionKernel::kComposite, AttentionKernel::kAuto}) {
      EXPECT_LE(testing::relative_difference(run(kernel, mask, softcap).output, expected), 1e-14)
          << "softcap " << softcap << ", " << to_string(kernel);
    }
  }
  // Capping changes the result here, so the comparison above tells it apart.
  EXPECT_GT(testing::relative_difference(run(AttentionKernel::kComposite, mask, 0.5).output,
                                         run(AttentionKernel::kComposite, mask).output),
            1e-3);
  if (fused_attention_available()) {  // the fused kernel has no cap: the composite one runs
    expect_same(run(AttentionKernel::kFused, mask, 0.5),
                run(AttentionKernel::kComposite, mask, 0.5), "softcap under kFused");
  }
}

TEST(Attention, TwoSidedWindowIsWrittenOut) {
  // Query t sees keys t - 1 .. t + 1 (less than 2 away) but no padding, and itself: the last
  // query of the second sequence, whose window holds only padding, has a key.
  const AttentionMask mask{false, example_padding(), 2};
  const torch::Tensor ones = torch::ones({kTime, kTime}, torch::kBool);
  const torch::Tensor blocked = ones.triu(2)
                                    .logical_or(ones.tril(-2))
                                    .logical_or(example_padding().view({kBatch, 1, 1, kTime}))
                                    .logical_and(torch::eye(kTime, torch::kBool).logical_not());
  const torch::Tensor expected = written_out(blocked);  // blocked (B, 1, T, S)
  EXPECT_TRUE(window_cuts(mask, kTime));
  for (const AttentionKernel kernel : {AttentionKernel::kComposite, AttentionKernel::kAuto}) {
    EXPECT_LE(testing::relative_difference(run(kernel, mask).output, expected), 1e-14)
        << to_string(kernel);
  }
  // A window as wide as the sequence blocks nothing.
  EXPECT_FALSE(window_cuts(AttentionMask{false, {}, kTime}, kTime));
  expect_same(run(AttentionKernel::kComposite, AttentionMask{false, {}, kTime}),
              run(AttentionKernel::kComposite, AttentionMask{}), "a window of the whole sequence");
}

// A sliding window that blocks keys takes LibTorch's bf16 products instead (the kernels mask
// causally and padding only), with the same tolerance.
TEST(Attention, CompositeUnderBf16AutocastRunsTheBf16KernelsAsOneNode) {
  if (!bf16_attention_available())
    GTEST_SKIP() << "this CPU has no avx512_bf16: the composite runs LibTorch's bf16 products";
  const ScopedAttentionKernel choice(AttentionKernel::kComposite);
  for (const int64_t key_heads : {kHeads, int64_t(1)})
    for (const NamedMask& named : every_mask()) {
      SCOPED_TRACE(::testing::Message() << named.what << ", " << key_heads << " key heads");
      torch::manual_seed(11);
      // float32 operands, as a Linear outside autocast or a rotary embedding leaves them.
      const auto leaf = [](int64_t heads) {
        return torch::randn({kBatch, kTime, heads, kHeadDim}).requires_grad_();
      };
      const torch::Tensor q = leaf(kHeads), k = leaf(key_heads);
      // v with its head dimension strided: the kernels take it made contiguous.
      const torch::Tensor v = torch::randn({kBatch, key_heads, kHeadDim, kTime})
                                  .transpose(2, 3)
                                  .transpose(1, 2)
                                  .requires_grad_();
      torch::Tensor output;
      {
        const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
        output = scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2), named.mask, 0.0, true);
      }
      EXPECT_EQ(output.scalar_type(), torch::kBFloat16);
      ASSERT_TRUE(output.grad_fn());
      EXPECT_EQ(output.grad_fn()->name().find("Bf16KernelAttention") != std::string::npos,
                !window_cuts(named.mask, kTime))
          << output.grad_fn()->name();
      const torch::Tensor d_output = torch::randn(output.sizes()).to(torch::kBFloat16);
      output.backward(d_output);
      for (const torch::Tensor* t : {&q, &k, &v})
        EXPECT_EQ(t->grad().scalar_type(), torch::kFloat);
      // float64 on the operands rounded to bf16, as autocast's products read them: within bf16's
      // roundings (2^-8 each) of the probabilities, the score gradients and the results.
      const auto rounded = [](const torch::Tensor& t) {
        return t.detach().to(torch::kBFloat16).to(torch::kFloat64).transpose(1, 2).requires_grad_();
      };
      const torch::Tensor q64 = rounded(q), k64 = rounded(k), v64 = rounded(v);
      const ScopedAttentionKernel composite(AttentionKernel::kComposite);
      const torch::Tensor expected =
          scaled_dot_product_attention(q64, k64, v64, named.mask, 0.0, true);
      expected.backward(d_output.to(torch::kFloat64));
      const double tolerance = 4.0 / 256.0;
      EXPECT_LE(testing::relative_difference(output.to(torch::kFloat64), expected), tolerance);
      EXPECT_LE(testing::relative_difference(q.grad().transpose(1, 2), q64.grad()), tolerance);
      EXPECT_LE(testing::relative_difference(k.grad().transpose(1, 2), k64.grad()), tolerance);
      EXPECT_LE(testing::relative_difference(v.grad().transpose(1, 2), v64.grad()), tolerance);
    }
}

TEST(Attention, AutoTakesTheFusedKernelOnGpusAndForLongSequencesOnTheCpu) {
  const AttentionKernel fused_if_available =
      fused_attention_available() ? AttentionKernel::kFused : AttentionKernel::kComposite;
  const auto auto_at = [](bool cpu, bool bf16, int64_t keys) {
    return resolve_attention_kernel(AttentionKernel::kAuto, AttentionSite{cpu, bf16, keys});
  };
  EXPECT_EQ(auto_at(true, false, 64), AttentionKernel::kComposite);
  EXPECT_EQ(auto_at(true, false, kFusedCpuMinKeys - 1), AttentionKernel::kComposite);
  EXPECT_EQ(auto_at(true, false, kFusedCpuMinKeys), fused_if_available);
  EXPECT_EQ(auto_at(true, true, kFusedCpuMinKeys), AttentionKernel::kComposite);
  EXPECT_EQ(auto_at(true, true, kFusedCpuBf16MinKeys), fused_if_available);
  EXPECT_EQ(auto_at(false, true, 8), fused_if_available);
  EXPECT_EQ(resolve_attention_kernel(AttentionKernel::kComposite, {false, false, 4096}),
            AttentionKernel::kComposite);
  EXPECT_EQ(resolve_attention_kernel(AttentionKernel::kFused, {true, true, 8}),
            AttentionKernel::kFused);
}

TEST(Attention, ParsesEveryNameAndRefusesOthersByField) {
  for (const AttentionKernel k :
       {AttentionKernel::kAuto, AttentionKernel::kFused, AttentionKernel::kComposite})
    EXPECT_EQ(parse_attention_kernel(to_string(k), "model.attention"), k);
  const std::string message =
      testing::input_error_of([] { parse_attention_kernel("flash", "model.attention"); });
  EXPECT_EQ(message, "model.attention must be \"auto\", \"fused\" or \"composite\", got \"flash\"");
}

TEST(Attention, FusedIsRefusedOnlyWhereLibTorchHasNone) {
  const AttentionKernel before = attention_kernel();
  if (fused_attention_available()) {
    set_attention_kernel(AttentionKernel::kFused, "model.attention");
    EXPECT_EQ(attention_kernel(), AttentionKernel::kFused);
  } else {
    const std::string message = testing::input_error_of(
        [] { set_attention_kernel(AttentionKernel::kFused, "model.attention"); });
    EXPECT_NE(message.find("model.attention = \"fused\" needs LibTorch 2.0 or later"),
              std::string::npos)
        << message;
  }
  set_attention_kernel(before, "model.attention");
}

TEST(Attention, GroupedKeysAndValuesEqualRepeatingThemPerQueryHead) {
  // 6 query heads on 2 key heads: query head h uses key head h / 3, as transformers' repeat_kv.
  constexpr int64_t kQueryHeads = 6, kKeyHeads = 2;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<AttentionKernel> kernels = {AttentionKernel::kComposite};
  if (fused_attention_available())
    kernels.push_back(AttentionKernel::kFused);
  for (const AttentionKernel kernel : kernels) {
    const ScopedAttentionKernel choice(kernel);
    for (const NamedMask& m : every_mask()) {
      SCOPED_TRACE(to_string(kernel) + ", " + m.what);
      torch::manual_seed(23);
      const torch::Tensor q =
          torch::randn({kBatch, kQueryHeads, kTime, kHeadDim}, options).requires_grad_();
      const torch::Tensor k =
          torch::randn({kBatch, kKeyHeads, kTime, kHeadDim}, options).requires_grad_();
      const torch::Tensor v =
          torch::randn({kBatch, kKeyHeads, kTime, kHeadDim}, options).requires_grad_();
      const torch::Tensor upstream = torch::randn({kBatch, kQueryHeads, kTime, kHeadDim}, options);
      const torch::Tensor grouped = scaled_dot_product_attention(q, k, v, m.mask, 0.0, true);
      const auto gradients = [&](const torch::Tensor& y) {
        return torch::autograd::grad({y}, {q, k, v}, {upstream});
      };
      const auto grouped_grads = gradients(grouped);
      const auto repeat = [&](const torch::Tensor& t) {
        return t.repeat_interleave(kQueryHeads / kKeyHeads, /*dim=*/1);
      };
      const torch::Tensor repeated =
          scaled_dot_product_attention(q, repeat(k), repeat(v), m.mask, 0.0, true);
      const auto repeated_grads = gradients(repeated);
      EXPECT_LE(testing::relative_difference(grouped, repeated), 1e-14);
      for (size_t i = 0; i < 3; ++i)
        EXPECT_LE(testing::relative_difference(grouped_grads[i], repeated_grads[i]), 1e-13) << i;
    }
  }
  const torch::Tensor q = torch::randn({1, 6, 3, 4});
  const torch::Tensor kv = torch::randn({1, 4, 3, 4});
  testing::expect_contains(testing::logic_error_of([&] {
                             scaled_dot_product_attention(q, kv, kv, {true, {}}, 0.0, false);
                           }),
                           {"dividing the 6 query heads", "got 4 and 4"});
}

TEST(Attention, CausalMaskNeedsAsManyQueriesAsKeys) {
  const torch::Tensor q = torch::randn({1, 1, 3, 4});
  const torch::Tensor kv = torch::randn({1, 1, 5, 4});
  EXPECT_THROW(scaled_dot_product_attention(q, kv, kv, {true, {}}, 0.0, false), std::logic_error);
}

}  // namespace
}  // namespace bigbatch::nn
