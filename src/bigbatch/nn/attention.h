// Scaled dot-product attention over a mask, on LibTorch's fused kernel where it has one and is
// the faster, on a composite of products and a softmax elsewhere. The one attention of every
// transformer bigbatch builds.
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch::nn {

/// The keys each query may attend to.
struct AttentionMask {
  /// Query t attends to keys 0..t only (as many queries as keys).
  bool causal = false;
  /// (B, S) bool, true at keys that no query attends to (padding); undefined: none.
  torch::Tensor padding;
  /// A sliding window: with `causal`, query t attends to keys t - window + 1 .. t only
  /// (transformers' sliding_window); without, to keys t - window + 1 .. t + window - 1, those
  /// less than `window` away on either side (ModernBERT's local attention of local_attention / 2
  /// keys each way: a window of local_attention / 2 + 1). 0: no window. With padding too, a query
  /// whose window holds only padding attends to itself, so that it has a key (its output is
  /// padding's own).
  int64_t window = 0;
};

/// Whether `mask`'s window blocks any key of `queries` queries (as many keys) that the mask
/// would allow without it.
bool window_cuts(const AttentionMask& mask, int64_t queries);

/// Which kernels compute attention.
enum class AttentionKernel {
  kAuto,       ///< by resolve_attention_kernel(): the faster of the two for the shape and device
  kFused,      ///< at::scaled_dot_product_attention (LibTorch 2.x: flash kernels on CPU and CUDA)
  kComposite,  ///< mask + scale in one baddbmm, softmax, dropout, matmul (nn/bf16_matmul's)
};

/// Reads "auto" | "fused" | "composite"; anything else throws InputError naming `field`.
AttentionKernel parse_attention_kernel(const std::string& text, const std::string& field);
/// The config spelling: "auto", "fused" or "composite".
std::string to_string(AttentionKernel kernel);
/// Whether this LibTorch has the fused kernel (2.0 and later).
bool fused_attention_available();

/// Sets the process-wide choice (default kAuto). kFused without fused_attention_available()
/// throws InputError naming `field`. Safe to call from any thread; takes effect for the next call.
void set_attention_kernel(AttentionKernel kernel, const std::string& field);
/// The process-wide choice, as set (kAuto is decided per call: it depends on autocast).
AttentionKernel attention_kernel();
/// What decides kAuto.
struct AttentionSite {
  bool cpu = true;             ///< the inputs are on the CPU
  bool bf16_autocast = false;  ///< CPU autocast computes in bf16 (only read when `cpu`)
  int64_t keys = 0;            ///< S, the keys each query is scored against
};

/// Keys from which kAuto takes the fused kernel on the CPU: LibTorch's flash kernel is the
/// slower below them and the faster above (bench/attention_kernels.py, docs/BENCHMARKS.md).
constexpr int64_t kFusedCpuMinKeys = 256;
/// The same under CPU bf16 autocast.
constexpr int64_t kFusedCpuBf16MinKeys = 1024;

/// What `kernel` runs at `site`: kAuto is kFused where this LibTorch has it and the inputs are on
/// a GPU or, on the CPU, from kFusedCpuMinKeys keys (kFusedCpuBf16MinKeys under bf16 autocast);
/// kComposite otherwise. kFused and kComposite are returned as they are.
AttentionKernel resolve_attention_kernel(AttentionKernel kernel, const AttentionSite& site);

/// The mask as scores to add: 0 where a query may attend to a key, -inf where `mask` blocks it,
/// in `options`' dtype and device; a view where it can be (a causal mask alone, no mask). With
/// `groups` > 1 the queries of `groups` heads that share a key head are stacked along the query
/// dimension (grouped-query attention), and the mask's rows repeat for each.
/// -> (B*H, groups*T, S)
torch::Tensor additive_attention_mask(const AttentionMask& mask, int64_t batch, int64_t heads,
                                      int64_t queries, int64_t keys,
                                      const torch::TensorOptions& options, int64_t groups = 1);

/// softmax(q k^T / sqrt(D) + mask) v, with dropout `dropout` on the probabilities when
/// `training`, by attention_kernel(). Every query must be left at least one key by `mask`, or
/// its output is NaN (composite) or undefined (fused). With fewer key and value heads KV than
/// query heads H (grouped-query attention), query head h uses key head h / (H / KV), as
/// transformers' repeat_kv; the composite kernel does so without copying keys and values per
/// query head. With `softcap` > 0 the scores are soft-capped before the mask, softcap *
/// tanh(scores / softcap) (Gemma 2's attn_logit_softcapping), on the composite kernel whatever
/// attention_kernel() says: the fused one has no such step.
/// q (B, H, T, D), k (B, KV, S, D), v (B, KV, S, D), KV dividing H -> (B, H, T, D)
torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const AttentionMask& mask,
                                           double dropout, bool training, double softcap = 0.0);

}  // namespace bigbatch::nn
