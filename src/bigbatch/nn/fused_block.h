// A pre-LN transformer block, x + attn(ln1(x)) then h + mlp(ln2(h)), as one autograd node whose
// forward and backward are written out as ATen kernel calls: the composite block's math with
// fewer kernels (bias adds inside the products, one layout copy each way for the heads) and
// none of autograd's per-operation bookkeeping. The GPT's and the BERT's blocks run on it; a
// Hugging Face BERT's post-LN layers run on nn/fused_post_ln_block, by the same setting.
#pragma once

#include <torch/torch.h>

#include <string>

#include "bigbatch/nn/attention.h"

namespace bigbatch::nn {

/// Which code computes a pre-LN transformer block.
enum class BlockKernel {
  kAuto,       ///< kFused where fused_block_supported() holds, kComposite elsewhere
  kFused,      ///< fused_pre_ln_block() wherever it is supported
  kComposite,  ///< one autograd operation per step (LayerNorm, Linear, attention, GELU, adds)
};

/// Reads "auto" | "fused" | "composite"; anything else throws InputError naming `field`.
BlockKernel parse_block_kernel(const std::string& text, const std::string& field);
/// The config spelling: "auto", "fused" or "composite".
std::string to_string(BlockKernel kernel);
/// Sets the process-wide choice (default kAuto). Safe to call from any thread.
void set_block_kernel(BlockKernel kernel);
/// The process-wide choice, as set.
BlockKernel block_kernel();

/// The parameters of one block, as the composite block's modules hold them.
struct PreLnBlockParameters {
  torch::Tensor ln1_weight;   ///< (C)
  torch::Tensor ln1_bias;     ///< (C)
  torch::Tensor qkv_weight;   ///< (3C, C): rows of queries, then keys, then values
  torch::Tensor qkv_bias;     ///< (3C)
  torch::Tensor proj_weight;  ///< (C, C): attention output projection
  torch::Tensor proj_bias;    ///< (C)
  torch::Tensor ln2_weight;   ///< (C)
  torch::Tensor ln2_bias;     ///< (C)
  torch::Tensor fc_weight;    ///< (4C, C)
  torch::Tensor fc_bias;      ///< (4C)
  torch::Tensor out_weight;   ///< (C, 4C): feed-forward output projection
  torch::Tensor out_bias;     ///< (C)
};

/// The shape settings of one block.
struct PreLnBlockShape {
  /// Attention heads; must divide C.
  int64_t heads = 1;
  /// Both LayerNorms' epsilon.
  double eps = 1e-5;
};

/// What a block is run on, as far as fused_pre_ln_block() cares.
struct BlockInputs {
  bool dropout_draws = false;                  ///< training with dropout p > 0
  c10::DeviceType device = c10::kCPU;          ///< where `x` is
  torch::ScalarType dtype = torch::kFloat;     ///< of `x`
  torch::ScalarType autocast = torch::kFloat;  ///< what autocast computes in there; x's dtype: off
};

/// Whether fused_pre_ln_block() can compute a block on `inputs`: dropout does not draw, and
/// either autocast is off and `x` is float32 or float64, or `x` is float32 under CPU autocast to
/// bf16 on LibTorch's bf16 kernels (bf16_matmul() is kNative).
bool fused_block_supports(const BlockInputs& inputs);

/// fused_block_supports() for `x` (B, T, C), or rows (N, C), under this thread's autocast.
bool fused_block_supported(const torch::Tensor& x, double dropout, bool training);

/// What decides whether a block runs fused.
struct BlockSite {
  bool supported = true;  ///< fused_block_supports() holds for the inputs
  bool cpu = true;        ///< the inputs are on the CPU (else a GPU)
  /// The attention the composite block would run, resolved (kFused or kComposite).
  AttentionKernel attention = AttentionKernel::kComposite;
};

/// kFused or kComposite: what `kernel` runs at `site`. kComposite where the fused block is not
/// supported; otherwise kFused for kFused, and for kAuto on the CPU where the attention is the
/// composite one (on a GPU, and on the CPU over many keys, LibTorch's fused attention is the
/// faster, and the fused block does not use it).
BlockKernel resolve_block_kernel(BlockKernel kernel, const BlockSite& site);

/// Whether a block with `dropout` over `x` (B, T, C) or rows (N, C), attending over `keys` keys,
/// runs fused (fused_pre_ln_block(), fused_post_ln_block()): resolve_block_kernel(block_kernel(),
/// ...) with the site read off `x`, autocast and attention_kernel().
bool use_fused_block(const torch::Tensor& x, double dropout, bool training, int64_t keys);

/// The pre-LN block x + proj(attention(ln1(x) W_qkv^T + b)) -> h, h + out(gelu(ln2(h) W_fc^T +
/// b)), as one autograd node. Attention is the composite's: softmax(q k^T / sqrt(D) + mask) v,
/// with the mask blocked by `mask` (every query must keep a key). Under CPU bf16 autocast it
/// rounds exactly where autocast does (products and everything after them in bf16, LayerNorms
/// and the residual stream in float32), so it matches the composite block within rounding.
/// Gradients flow to `x` and to every parameter that requires one; there is no second
/// derivative (a backward with create_graph throws), and a second backward through the same
/// graph (retain_graph) throws: backward lets go of the activations as it uses them.
/// x (B, T, C) -> (B, T, C)
torch::Tensor fused_pre_ln_block(const torch::Tensor& x, const PreLnBlockParameters& parameters,
                                 const PreLnBlockShape& shape, const AttentionMask& mask);

}  // namespace bigbatch::nn
