// What the fused transformer blocks share (nn/fused_block: pre-LN; nn/fused_post_ln_block:
// post-LN): the scope of their kernels, casts to the compute dtype, their parameters' gradients,
// and attention over the columns of one qkv product, on the bf16 attention kernels or on batched
// products and a softmax. Internal to those blocks.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <tuple>

#include "bigbatch/nn/attention.h"

namespace bigbatch::nn::block_parts {

/// The scope of a block's own kernels: autocast's casts are made explicitly (so CPU autocast must
/// not cast again), and no autograd graph is recorded (the block is one node).
struct KernelScope {
  c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::DispatchKey::AutocastCPU};
  at::AutoDispatchBelowADInplaceOrView below_autograd;
};

/// `t` in `dtype` (itself when it already is).
torch::Tensor in_dtype(const torch::Tensor& t, torch::ScalarType dtype);

/// t^T (C, R) of a contiguous bf16 t (R, C), as a row-major copy.
torch::Tensor transposed_copy(const torch::Tensor& t);

/// residual + product (N, C): a float32 residual stream and a block's product in the compute
/// dtype, in float32. One pass (the product widened as it is added) for contiguous float32 and
/// bf16 CPU tensors, bitwise at::add's sum; at::add elsewhere.
torch::Tensor add_residual(const torch::Tensor& residual, const torch::Tensor& product);

/// A product's gradients for its parameters, in the parameters' dtype, or undefined for a
/// parameter that takes none: grad^T input for the weight, the column sums of grad for the bias
/// (of a contiguous bf16 grad into float32 on the row kernels, summed in float32 without a
/// rounding to bf16 between). A bf16 weight gradient of `weight` (the parameter, where given) is
/// undefined too where add_to_weight_grad has added it to weight.grad() itself
/// (nn/direct_weight_grads: inside a backward() into .grad).
torch::Tensor weight_grad(bool wanted, const torch::Tensor& grad, const torch::Tensor& input,
                          torch::ScalarType dtype, const torch::Tensor& weight = torch::Tensor());
torch::Tensor bias_grad(bool wanted, const torch::Tensor& grad, torch::ScalarType dtype);

/// How weight_grad multiplies: grad^T input is the product a @ b, transposed back where
/// `transposed` (a (O or I, N), b (N, I or O)).
struct WeightProduct {
  torch::Tensor a, b;
  bool transposed = false;
};
/// Where a weight gradient's product runs: on all the threads (nn::gemm), or perhaps on one beside
/// another product (nn::gemms_side_by_side).
enum class ProductThreads { kAll, kMaybeOne };
/// weight_grad's product operands for grad (N, O) and input (N, I): a transposed view, or a
/// row-major copy of input^T where transposed_input_pays or of grad^T where transposed_grad_pays
/// (copies are made here).
WeightProduct weight_product_operands(const torch::Tensor& grad, const torch::Tensor& input,
                                      ProductThreads threads = ProductThreads::kAll);
/// weight_grad of several weights stacked by rows as one product's (query, key and value: each
/// (O_k, I), grad (N, sum O_k) their outputs side by side): each one's gradient, undefined where
/// not `wanted[k]` or added to weights[k].grad() itself (add_to_weight_grad).
std::vector<torch::Tensor> stacked_weight_grads(const std::vector<bool>& wanted,
                                                const torch::Tensor& grad,
                                                const torch::Tensor& input, torch::ScalarType dtype,
                                                const std::vector<torch::Tensor>& weights);
/// weight_grad from its product: `product` is operands.a @ operands.b as nn::gemm computes it
/// (bitwise), for callers that run several products at once (nn/bf16_linear's groups).
torch::Tensor weight_grad_from_product(const WeightProduct& operands, const torch::Tensor& product,
                                       torch::ScalarType dtype,
                                       const torch::Tensor& weight = torch::Tensor());

/// A product's output gradient `grad` (N, O) in the product's dtype `compute`, and where `wanted`
/// the product's bias gradient (O), the column sums of that gradient, in `dtype` (as bias_grad).
/// One pass (nn/layer_norm_kernels: bf16_rows_and_column_sums) for a contiguous float32 CPU grad
/// and bf16 `compute` with float32 sums; in_dtype and bias_grad elsewhere. Bitwise the same.
std::pair<torch::Tensor, torch::Tensor> in_dtype_with_bias_grad(const torch::Tensor& grad,
                                                                torch::ScalarType compute,
                                                                bool wanted,
                                                                torch::ScalarType dtype);

/// Whether a weight gradient grad^T input, grad (`rows`, `outputs`) and input (`rows`, `inputs`)
/// in bf16, multiplies a row-major input^T (I, N): on a CPU with AMX, for products of at least
/// 2^27 multiply-adds whose outputs are at least twice the inputs (a qkv or a feed-forward
/// network's first product). weight_grad then takes input^T where it is given as a transposed
/// view of it (input = t.t() for a contiguous t (I, N)) and makes the copy otherwise.
bool transposed_input_pays(int64_t rows, int64_t outputs, int64_t inputs);

/// Whether that weight gradient multiplies a row-major grad^T (O, N) instead (no transposing back):
/// on a CPU with AMX, for products of at least 2^27 multiply-adds whose inputs are at least twice
/// the outputs (an output projection), or as many where the product may run on one thread, on
/// which oneDNN ran a square one from the copy 1.6x as fast as from the view (docs/BENCHMARKS.md).
bool transposed_grad_pays(int64_t rows, int64_t outputs, int64_t inputs, ProductThreads threads);

/// A LayerNorm's result in a block's compute dtype and what its backward reads.
struct NormedRows {
  torch::Tensor normed;      ///< (N, C) in the compute dtype
  torch::Tensor mean, rstd;  ///< (N, 1) float32 each
  /// normed^T (C, N), row-major, where layer_norm_in was asked for it and ran on the row
  /// kernels; undefined otherwise.
  torch::Tensor transposed;
  /// normed as a weight gradient reads it: transposed.t() (a view) where defined, else normed.
  torch::Tensor for_weight_grad() const { return transposed.defined() ? transposed.t() : normed; }
};

/// The LayerNorm of the float32 rows x (N, C) with weight and bias (C), in `compute`: for bf16 on
/// the row kernels (nn/layer_norm_kernels.h: one pass, rounded once) where x, weight and bias
/// are contiguous float32 CPU tensors, else at::native_layer_norm and a cast. With `transposed`
/// the row kernels also write normed^T (NormedRows::transposed).
NormedRows layer_norm_in(const torch::Tensor& x, const torch::Tensor& weight,
                         const torch::Tensor& bias, double eps, torch::ScalarType compute,
                         bool transposed = false);

/// The LayerNorm's backward for the gradient `d_normed` (N, C) of layer_norm_in's result, in the
/// compute dtype or float32, with the residual's gradient (N, C, float32; undefined: none) added
/// to dx: (dx, d_weight, d_bias), each undefined unless `wanted`. On the row kernels for a
/// contiguous bf16 d_normed where layer_norm_in ran on them; else a cast to float32,
/// at::native_layer_norm_backward and an add.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_backward_in(
    const torch::Tensor& d_normed, const torch::Tensor& x, const NormedRows& saved,
    const torch::Tensor& weight, const torch::Tensor& bias, std::array<bool, 3> wanted,
    const torch::Tensor& residual);

/// How a block computes attention. kBf16Kernels reads q, k and v from the columns of the qkv
/// product and writes their gradients there (nn/bf16_attention.h); kComposite copies them
/// head-major for batched products and a softmax.
enum class AttentionPath : int64_t { kComposite, kBf16Kernels };

/// A block's attention over B sequences of T positions with H heads.
struct BlockAttention {
  AttentionPath path = AttentionPath::kComposite;
  int64_t batch = 0;  ///< B
  int64_t heads = 1;  ///< H
  bool causal = false;
  /// kBf16Kernels: the (B, T) bool padding, or an empty tensor for none (LibTorch 1.13's
  /// Function::apply takes no undefined tensor); kComposite: the additive mask, broadcastable to
  /// (B*H, T, T), in the compute dtype.
  torch::Tensor mask;
  torch::ScalarType compute = torch::kFloat;  ///< the dtype of qkv and of the products
};

/// What a fused block computes its products in for `x` (rows (N, C) or (B, T, C)) under this
/// thread's autocast: bf16 under CPU bf16 autocast, else x's dtype. Throws naming `block` where
/// `heads` do not divide the width or fused_block_supported() does not hold.
torch::ScalarType checked_compute_dtype(const torch::Tensor& x, int64_t heads, const char* block);

/// The attention a block of width `embed` runs in `compute` over (B, T) = (`batch`, `time`)
/// under `mask`: the bf16 kernels for bf16 on the CPU with an even head width where this build
/// has them, the composite path otherwise.
BlockAttention choose_block_attention(const AttentionMask& mask, int64_t batch, int64_t time,
                                      int64_t heads, int64_t embed, torch::ScalarType compute,
                                      const torch::Device& device);

/// What attention_forward keeps for attention_backward.
struct AttentionSaved {
  /// qkv itself (N, 3C) on kBf16Kernels; its head-major copy (3, B*H, T, D) on kComposite
  torch::Tensor input;
  torch::Tensor probs;  ///< the probabilities: (B, H, T, T) or (B*H, T, T)
};

/// softmax(q k^T / sqrt(D) + mask) v for the q, k and v columns of qkv (N, 3C), N = B*T rows
/// in sequence order -> (N, C), in `attention.compute`.
torch::Tensor attention_forward(const BlockAttention& attention, const torch::Tensor& qkv,
                                AttentionSaved& saved);

/// dq, dk and dv as the columns of one (N, 3C) tensor for the gradient d_y (N, C) of
/// attention_forward's result. Lets go of `saved` as it goes.
torch::Tensor attention_backward(const BlockAttention& attention, AttentionSaved saved,
                                 const torch::Tensor& d_y);

/// A block's feed-forward network, residual + gelu(input W_fc^T + b_fc) W_out^T + b_out, in
/// `compute` (the weights and biases cast to it, the result added to the float32 residual):
/// input (N, C) in `compute`, residual (N, C) -> (N, C). Keeps what feed_forward_backward reads
/// in `ctx` (kFeedForwardKept among it); of the input, `kept_input` where given (the same values
/// as weight_grad reads them: NormedRows::for_weight_grad()).
torch::Tensor feed_forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                           const torch::Tensor& residual, const torch::Tensor& fc_weight,
                           const torch::Tensor& fc_bias, const torch::Tensor& out_weight,
                           const torch::Tensor& out_bias, torch::ScalarType compute,
                           const torch::Tensor& kept_input = torch::Tensor());
/// A name feed_forward keeps in `ctx` and feed_forward_backward takes (check_first_backward).
constexpr const char* kFeedForwardKept = "ff_f";

/// Where the feed-forward network's parameters stand among a block's autograd inputs.
struct FeedForwardInputs {
  int64_t fc_weight, fc_bias, out_weight, out_bias;
};
/// feed_forward's backward for the gradient `grad` (N, C) of its result, through the product
/// only (the residual's gradient is `grad` itself): sets the gradients of the parameters at
/// `at` in `result`, in `param`, for those of keep_inputs' inputs that require one, and returns
/// the input's (N, C), in `input_grad`. Lets go of what feed_forward kept.
torch::Tensor feed_forward_backward(torch::autograd::AutogradContext* ctx,
                                    const torch::Tensor& grad, const FeedForwardInputs& at,
                                    torch::autograd::variable_list& result,
                                    torch::ScalarType compute, torch::ScalarType param,
                                    torch::ScalarType input_grad);

/// Keeps the settings attention_backward needs besides AttentionSaved in `ctx`.
void save_attention(torch::autograd::AutogradContext* ctx, const BlockAttention& attention);
/// The settings save_attention kept.
BlockAttention saved_attention(torch::autograd::AutogradContext* ctx);

/// Keeps the block's tensor `inputs` (x, then its parameters) and their versions in `ctx`.
void keep_inputs(torch::autograd::AutogradContext* ctx,
                 std::initializer_list<const torch::Tensor*> inputs);
/// The inputs keep_inputs kept, in their order.
c10::List<torch::Tensor> kept_inputs(torch::autograd::AutogradContext* ctx);
/// Throws, as autograd does for a saved variable, when a kept input was changed in place between
/// forward and backward (an optimizer step inside the window, say); `block` names the caller, and
/// `order` the order of its inputs.
void check_unchanged(torch::autograd::AutogradContext* ctx, const char* block, const char* order);

/// The saved tensor `name` of `ctx`, no longer held by it: backward lets go of each activation
/// once it is used, as autograd does between a composite block's nodes.
torch::Tensor take(torch::autograd::AutogradContext* ctx, const char* name);

/// Throws unless backward may run: no second derivative (create_graph), and not a second time
/// through the same node (retain_graph); `kept` names a tensor the first backward takes.
void check_first_backward(torch::autograd::AutogradContext* ctx, const char* block,
                          const char* kept);

}  // namespace bigbatch::nn::block_parts
