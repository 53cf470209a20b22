// The bf16 attention kernels against float64 arithmetic on the same bf16 values: the output and
// probabilities within their one bf16 rounding, the gradients within the roundings of the score
// gradients and of the results, for causal and padding masks, odd sizes and strided operands.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bigbatch/nn/bf16_attention.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;

#define SKIP_WITHOUT_BF16_ATTENTION() \
  if (!bf16_attention_available())    \
  GTEST_SKIP() << "this CPU has no avx512_bf16: the bf16 attention kernels cannot run here"

/// One case: the shape and mask, and whether q, k and v are the strided columns of one
/// (B, T, 3, H, D) tensor, as a fused qkv product leaves them, or rows D + 1 values apart (their
/// pairs of values not 32-bit aligned).
struct Case {
  int64_t batch, heads, queries, keys, head_dim;
  bool causal = false;
  bool padding = false;
  bool strided = false;
  bool odd_rows = false;
  int64_t key_heads = 0;  // 0: as many as query heads
};

/// The float64 reference: y, the probabilities, and softmax's backward.
struct Reference {
  Tensor probs, y;  // (B, H, T, S), (B, H, T, D)
};

/// (B, 1, 1, S) additive mask in float64: -inf where a key is blocked.
Tensor additive_mask(const Case& c, const Tensor& padding) {
  Tensor blocked = torch::zeros({c.queries, c.keys}, torch::kBool);
  if (c.causal)
    blocked = torch::ones({c.queries, c.keys}, torch::kBool).triu(1);
  Tensor full = blocked.view({1, 1, c.queries, c.keys});
  if (padding.defined())
    full = full.logical_or(padding.view({c.batch, 1, 1, c.keys}));
  return torch::zeros(full.sizes(), torch::kDouble)
      .masked_fill(full, -std::numeric_limits<double>::infinity());
}

Tensor as_double(const Tensor& t) {
  return t.to(torch::kDouble);
}

/// |actual - expected| <= bound elementwise, and some value not zero (a kernel that wrote
/// nothing would fail).
void expect_within(const Tensor& actual, const Tensor& expected, const Tensor& bound,
                   const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const Tensor excess = (as_double(actual) - expected).abs() - bound;
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": largest error " << (as_double(actual) - expected).abs().max().item<double>();
  EXPECT_GT(expected.abs().max().item<double>(), 0.0) << what;
}

/// The product paths to test for heads of `head_dim`: vdpbf16ps, and AMX tiles where they run.
std::vector<bool> amx_choices(int64_t head_dim) {
  if (bf16_attention_amx_runs(head_dim))
    return {false, true};
  return {false};
}

void check_case_on(const Case& c, bool use_amx) {
  SCOPED_TRACE(::testing::Message()
               << "B " << c.batch << " H " << c.heads << " T " << c.queries << " S " << c.keys
               << " D " << c.head_dim << " causal " << c.causal << " padding " << c.padding
               << " strided " << c.strided << " AMX " << use_amx);
  torch::manual_seed(7);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  Tensor q, k, v;
  if (c.strided) {
    ASSERT_EQ(c.queries, c.keys);
    const Tensor qkv = torch::randn({c.batch, c.queries, 3, c.heads, c.head_dim}, bf16);
    q = qkv.select(2, 0).permute({0, 2, 1, 3});
    k = qkv.select(2, 1).permute({0, 2, 1, 3});
    v = qkv.select(2, 2).permute({0, 2, 1, 3});
  } else if (c.odd_rows) {
    const auto rows = [&](int64_t n) {
      return torch::randn({c.batch, c.heads, n, c.head_dim + 1}, bf16).narrow(3, 0, c.head_dim);
    };
    q = rows(c.queries);
    k = rows(c.keys);
    v = rows(c.keys);
  } else {
    const int64_t key_heads = c.key_heads > 0 ? c.key_heads : c.heads;
    q = torch::randn({c.batch, c.heads, c.queries, c.head_dim}, bf16);
    k = torch::randn({c.batch, key_heads, c.keys, c.head_dim}, bf16);
    v = torch::randn({c.batch, key_heads, c.keys, c.head_dim}, bf16);
  }
  // Grouped keys: the reference repeats each key head for its query heads, and sums their
  // gradients back.
  const int64_t groups = c.heads / k.size(1);
  const auto repeated = [groups](const Tensor& t) {  // (B, KV, S, D) -> (B, H, S, D), float64
    return as_double(t).repeat_interleave(groups, 1);
  };
  const auto summed = [groups](const Tensor& t) {  // (B, H, S, D) -> (B, KV, S, D)
    return t.view({t.size(0), t.size(1) / groups, groups, t.size(2), t.size(3)}).sum(2);
  };
  Tensor padding;
  if (c.padding) {  // the last third of the keys of batch entry 0, every other key of entry 1
    padding = torch::zeros({c.batch, c.keys}, torch::kBool);
    padding[0].slice(0, c.keys - c.keys / 3).fill_(true);
    if (c.batch > 1)
      padding[1].slice(0, 1, c.keys, 2).fill_(true);
  }
  const double scale = 1.0 / std::sqrt(double(c.head_dim));
  Bf16AttentionInputs inputs{q, k, v, {c.causal, padding}, scale};
  inputs.use_amx = use_amx;

  // Forward against float64 on the same bf16 values: each probability is rounded to bf16 once
  // (at most 2^-8 of it, bf16's unit roundoff), y sums them times v and is rounded once. 1e-5
  // more covers float32's exp and sums.
  const Tensor y = torch::full({c.batch, c.heads, c.queries, c.head_dim}, 7.0, bf16);
  const Tensor pairs = bf16_attention_forward(inputs, y);  // (B, H, Tp/2, Sp, 2)
  const Tensor probs = bf16_attention_probabilities(pairs, c.queries, c.keys);
  // Past T and S, where the kernels' tiles pad them, the pairs hold zeros.
  const Tensor padded = bf16_attention_probabilities(pairs, 2 * pairs.size(2), pairs.size(3));
  EXPECT_EQ(padded.slice(2, c.queries).count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(padded.slice(3, c.keys).count_nonzero().item<int64_t>(), 0);
  const Tensor scores = torch::matmul(as_double(q), repeated(k).transpose(-2, -1)) * scale +
                        additive_mask(c, padding);
  const Tensor p_ref = torch::softmax(scores, -1);         // (B, H, T, S)
  const Tensor y_ref = torch::matmul(p_ref, repeated(v));  // (B, H, T, D)
  const double once = std::ldexp(1.0, -8) + 1e-5, twice = std::ldexp(1.0, -7) + 1e-5;
  expect_within(probs, p_ref, p_ref * once + 1e-30, "probabilities");
  expect_within(y, y_ref, torch::matmul(p_ref, repeated(v).abs()) * twice + 1e-6, "y");

  // Backward against float64 from the kernel's own probabilities: dv is rounded once, dq and dk
  // also carry the rounding of the score gradients to bf16.
  const Tensor dy = torch::randn({c.batch, c.heads, c.queries, c.head_dim}, bf16);
  const Tensor dq = torch::full_like(q, 7.0), dk = torch::full_like(k, 7.0);
  const Tensor dv = torch::full_like(v, 7.0);
  bf16_attention_backward(inputs, pairs, dy, {dq, dk, dv});
  const Tensor p = as_double(probs);
  const Tensor dp = torch::matmul(as_double(dy), repeated(v).transpose(-2, -1));
  const Tensor ds = p * (dp - (p * dp).sum(-1, true)) * scale;  // (B, H, T, S)
  const Tensor dv_ref = summed(torch::matmul(p.transpose(-2, -1), as_double(dy)));
  const Tensor dq_ref = torch::matmul(ds, repeated(k));
  const Tensor dk_ref = summed(torch::matmul(ds.transpose(-2, -1), as_double(q)));
  expect_within(dv, dv_ref,
                summed(torch::matmul(p.transpose(-2, -1), as_double(dy).abs())) * once + 1e-6,
                "dv");
  expect_within(dq, dq_ref, torch::matmul(ds.abs(), repeated(k).abs()) * twice + 1e-6, "dq");
  expect_within(
      dk, dk_ref,
      summed(torch::matmul(ds.abs().transpose(-2, -1), as_double(q).abs())) * twice + 1e-6, "dk");
}

void check_case(const Case& c) {
  for (const bool amx : amx_choices(c.head_dim))
    check_case_on(c, amx);
}

TEST(Bf16Attention, MatchesFloat64OnTheFusedBlocksStridedCausalHeads) {
  SKIP_WITHOUT_BF16_ATTENTION();
  check_case({2, 3, 64, 64, 32, /*causal=*/true, /*padding=*/false, /*strided=*/true});
}

TEST(Bf16Attention, MatchesFloat64AtSizesThatAreNotWholeTiles) {
  SKIP_WITHOUT_BF16_ATTENTION();
  check_case({1, 2, 17, 17, 16, /*causal=*/true});
  check_case({2, 1, 9, 23, 48});
  check_case({2, 1, 9, 23, 64});  // on AMX tiles where the CPU has them: 9 and 23 padded to 32
  check_case({1, 2, 17, 17, 32, /*causal=*/true});
  check_case({1, 2, 24, 24, 128, /*causal=*/false, /*padding=*/false, /*strided=*/true});
  check_case({2, 2, 40, 40, 32, /*causal=*/true, /*padding=*/false, /*strided=*/false,
              /*odd_rows=*/true});
}

TEST(Bf16Attention, MatchesFloat64ForOneQueryAndForContextsPastTheKeptBuffers) {
  SKIP_WITHOUT_BF16_ATTENTION();
  check_case({3, 2, 1, 20, 32, /*causal=*/false, /*padding=*/true});  // a first-token query
  // 1100 keys: the (T, S) buffers of backward, 2.4 MB each, are allocated per call.
  check_case({1, 1, 1100, 1100, 16, /*causal=*/true});
  check_case({1, 1, 300, 300, 32, /*causal=*/true});  // the same, head dimension 32 (AMX)
}

TEST(Bf16Attention, MatchesFloat64WithKeyHeadsSharedByQueryHeads) {
  SKIP_WITHOUT_BF16_ATTENTION();
  Case grouped{2, 6, 40, 40, 64, /*causal=*/true};  // the bench Llama's 6 heads on 2
  grouped.key_heads = 2;
  check_case(grouped);
  Case padded{2, 4, 17, 17, 32, /*causal=*/false, /*padding=*/true};
  padded.key_heads = 1;
  check_case(padded);
}

TEST(Bf16Attention, MatchesFloat64UnderPaddingMasks) {
  SKIP_WITHOUT_BF16_ATTENTION();
  check_case({2, 2, 40, 40, 32, /*causal=*/false, /*padding=*/true});
  check_case({2, 2, 130, 130, 64, /*causal=*/true, /*padding=*/true});
}

TEST(Bf16Attention, ProductsOnAmxTilesAgreeWithVdpbf16ps) {
  SKIP_WITHOUT_BF16_ATTENTION();
  if (!bf16_attention_amx_available())
    GTEST_SKIP() << "this CPU has no amx_bf16 (or Linux refused the tile state): only the "
                    "vdpbf16ps products run here";
  torch::manual_seed(11);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const Tensor qkv = torch::randn({2, 48, 3, 4, 64}, bf16);  // (B, T, 3, H, D)
  const auto column = [&](const Tensor& t, int64_t which) {  // (B, H, T, D)
    return t.select(2, which).permute({0, 2, 1, 3});
  };
  const Tensor dy = torch::randn({2, 4, 48, 64}, bf16);
  std::vector<Tensor> results[2];
  for (const bool amx : {false, true}) {
    Bf16AttentionInputs in{column(qkv, 0), column(qkv, 1), column(qkv, 2), {true, {}}, 0.125};
    in.use_amx = amx;
    const Tensor y = torch::empty({2, 4, 48, 64}, bf16);
    const Tensor probs = bf16_attention_forward(in, y);
    const Tensor d_qkv = torch::full_like(qkv, 7.0);
    bf16_attention_backward(in, probs, dy, {column(d_qkv, 0), column(d_qkv, 1), column(d_qkv, 2)});
    results[amx] = {bf16_attention_probabilities(probs, 48, 48), y, d_qkv};
  }
  // Both sum the same float32 products in another order: at most a bf16 rounding apart.
  const char* names[] = {"probabilities", "y", "d qkv"};
  for (size_t i = 0; i < 3; ++i) {
    const Tensor vdp = as_double(results[0][i]), amx = as_double(results[1][i]);
    EXPECT_LE(((amx - vdp).abs() - vdp.abs() * std::ldexp(1.0, -7) - 1e-6).max().item<double>(),
              0.0)
        << names[i];
    EXPECT_GT(vdp.abs().max().item<double>(), 0.0) << names[i];
  }
}

TEST(Bf16Attention, AQueryLeftNoKeyIsNan) {
  SKIP_WITHOUT_BF16_ATTENTION();
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const Tensor q = torch::randn({2, 1, 4, 16}, bf16), k = torch::randn({2, 1, 4, 16}, bf16);
  const Tensor v = torch::randn({2, 1, 4, 16}, bf16);
  Tensor padding = torch::zeros({2, 4}, torch::kBool);
  padding[1].fill_(true);
  const Tensor y = torch::empty_like(q);
  bf16_attention_forward({q, k, v, {false, padding}, 0.25}, y);
  EXPECT_TRUE(y[0].isfinite().all().item<bool>());
  EXPECT_TRUE(y[1].isnan().all().item<bool>());
}

TEST(Bf16Attention, RefusesWhatItCannotRun) {
  SKIP_WITHOUT_BF16_ATTENTION();
  const Tensor q = torch::randn({1, 1, 4, 16}, torch::kBFloat16);
  const Tensor y = torch::empty_like(q);
  try {
    bf16_attention_forward({q.to(torch::kFloat), q, q, {}, 1.0}, y);
    FAIL() << "float32 q was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("q must be a 4-D bfloat16 CPU tensor"), std::string::npos)
        << e.what();
  }
  const Tensor odd = torch::randn({1, 1, 4, 15}, torch::kBFloat16);
  EXPECT_THROW(bf16_attention_forward({odd, odd, odd, {}, 1.0}, torch::empty_like(odd)),
               std::exception);
  const Tensor transposed = torch::randn({1, 1, 16, 4}, torch::kBFloat16).transpose(2, 3);
  EXPECT_THROW(bf16_attention_forward({transposed, q, q, {}, 1.0}, y), std::exception);
  // The backward takes the forward's pairs of rows, not the probabilities unpacked.
  const Tensor pairs = bf16_attention_forward({q, q, q, {}, 1.0}, y);
  try {
    bf16_attention_backward({q, q, q, {}, 1.0}, bf16_attention_probabilities(pairs, 4, 4), q,
                            {torch::empty_like(q), torch::empty_like(q), torch::empty_like(q)});
    FAIL() << "unpacked probabilities were taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("probs must be what forward returned"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bigbatch::nn
