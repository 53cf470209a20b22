// Attention over short contexts in bfloat16 on the CPU, forward and backward in one pass per
// head, its products on AMX tiles where the CPU has them, else on AVX-512 BF16's dot-product
// instruction (vdpbf16ps).
//
// Under bf16 autocast the composite attention is six batched products, a softmax and its
// backward, a mask added and a scale applied, and the copies that put q, k and v head-major; at a
// context of 64 each is a call of a few microseconds on oneDNN or ATen. These kernels do a head's
// scores, softmax and weighted values while they sit in L1, skip the keys a causal mask blocks,
// and read and write q, k, v and their gradients where they lie (the columns of a fused qkv
// product). Scores and probabilities stay float32 until the probabilities are rounded once to
// bf16 (the values the products and backward read); every product accumulates in float32 and is
// rounded to bf16 once. The probabilities are kept in pairs of query rows, the layout in which
// the backward's products over the queries (dv^T = dy^T P, dk^T = q^T dS) read them without a
// transpose. Measured in docs/BENCHMARKS.md.
#pragma once

#include <torch/torch.h>

namespace bigbatch::nn {

/// Whether this CPU and build run the kernels below: x86-64 with avx512_bf16 (and avx512bw),
/// built with GCC.
bool bf16_attention_available();

/// Whether the kernels' products can run on AMX tiles here (amx_bf16, and Linux granted the tile
/// state): they do for head dimensions that are multiples of 32 unless the inputs say not.
bool bf16_attention_amx_available();

/// Whether the products of heads of `head_dim` run on AMX tiles here (unless the inputs say not):
/// bf16_attention_amx_available() and head_dim a multiple of 32, a tile row's bf16 values.
bool bf16_attention_amx_runs(int64_t head_dim);

/// The keys each query attends to.
struct Bf16AttentionMask {
  bool causal = false;    ///< query t attends to keys 0..t only
  torch::Tensor padding;  ///< (B, S) bool, true at keys no query attends to; undefined: none
};

/// q (B, H, T, D), k and v (B, KV, S, D) with KV dividing H (query head h reads key head
/// h / (H / KV), grouped-query attention): bf16 CPU tensors of any strides whose last dimension
/// is contiguous, D even. Every query must be left at least one key, or its row is NaN.
struct Bf16AttentionInputs {
  torch::Tensor q, k, v;
  Bf16AttentionMask mask;
  double scale = 1.0;  ///< multiplies q k^T before the mask
  /// The products on AMX tiles where bf16_attention_amx_runs(D); false: on vdpbf16ps always (the
  /// tests compare the two).
  bool use_amx = true;
};

/// y = softmax(scale q k^T + mask) v, written into `y` (B, H, T, D), bf16, any strides with a
/// contiguous last dimension. Returns the probabilities P in pairs of query rows, what
/// bf16_attention_backward reads (the operand layout of its products by P): (B, H, Tp/2, Sp, 2)
/// bf16, contiguous, [b][h][i][j][r] = P[2i + r][j], T and S padded to the kernels' tiles (Tp,
/// Sp) with zeros. bf16_attention_probabilities() unpacks it. Runs the heads on LibTorch's
/// OpenMP threads.
torch::Tensor bf16_attention_forward(const Bf16AttentionInputs& inputs, const torch::Tensor& y);

/// The probabilities (B, H, T, S) of `pairs`, as bf16_attention_forward returned them for
/// `queries` T and `keys` S: a view.
torch::Tensor bf16_attention_probabilities(const torch::Tensor& pairs, int64_t queries,
                                           int64_t keys);

/// Where bf16_attention_backward writes the gradients: (B, H, T, D) for dq, (B, KV, S, D) for dk
/// and dv (summed over the query heads that share a key head, rounded once), bf16, any strides with
/// a contiguous last dimension (the columns of one (N, 3C) tensor, say).
struct Bf16AttentionGradients {
  torch::Tensor dq, dk, dv;
};

/// Gradients of bf16_attention_forward for the output gradient dy (B, H, T, D), bf16, any strides
/// with a contiguous last dimension, and the probabilities it returned (its pairs of rows).
void bf16_attention_backward(const Bf16AttentionInputs& inputs, const torch::Tensor& probs,
                             const torch::Tensor& dy, const Bf16AttentionGradients& gradients);

}  // namespace bigbatch::nn
