// LoRA (low-rank adapters, Hu et al. 2021) on frozen pretrained weights: a linear layer whose
// weight stays as loaded while a rank-r update B A, scaled by alpha / r, trains beside it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bigbatch::nn {

/// How a weight is stored: (out, in) as torch::nn::Linear, or (in, out) as Hugging Face's Conv1D.
enum class WeightLayout { kOutIn, kInOut };

/// A linear layer that can carry a LoRA adapter. Parameters `weight` and `bias` (if any) keep the
/// checkpoint's names; add_lora() registers `lora_A.weight` (rank, in) and `lora_B.weight`
/// (out, rank) beside them. Without an adapter it computes nn::linear(x, W, b).
class AdaptedLinearImpl : public torch::nn::Module {
 public:
  AdaptedLinearImpl(int64_t in, int64_t out, bool bias, WeightLayout layout = WeightLayout::kOutIn);
  /// x (..., in) -> (..., out): x W^T + b, plus (alpha / rank) B A dropout(x) with an adapter.
  torch::Tensor forward(const torch::Tensor& x);
  /// Adds an adapter of `rank` (A from kaiming-uniform as PEFT initialises it, B zero, so the
  /// layer computes what it did until B trains), in the weight's dtype, or float32 where the
  /// weight is stored in bfloat16 or float16. Throws InputError for rank < 1, alpha <= 0,
  /// dropout outside [0, 1), or a second adapter.
  void add_lora(int64_t rank, double alpha, double dropout);
  /// Whether add_lora() was called.
  bool has_lora() const { return lora_A.defined(); }
  /// How `weight` is stored.
  WeightLayout layout() const { return layout_; }
  /// The adapter's alpha / rank (0 before add_lora()).
  double lora_scale() const { return scale_; }
  /// The adapter's dropout probability on its input.
  double lora_dropout() const { return dropout_; }

  torch::Tensor weight, bias;
  torch::Tensor lora_A, lora_B;  ///< (rank, in), (out, rank); undefined without an adapter

 private:
  int64_t in_, out_;
  WeightLayout layout_;
  double scale_ = 0.0, dropout_ = 0.0;
};
/// Module holder for AdaptedLinearImpl.
TORCH_MODULE(AdaptedLinear);

/// Whether module `name` is what `pattern` names: the whole name or its last components ("q_proj"
/// names "model.layers.0.self_attn.q_proj"), as LoraOptions.targets and PEFT's target_modules
/// match them.
bool module_named(const std::string& name, const std::string& pattern);

/// While alive, AdaptedLinears constructed on this thread store their weight and bias in `dtype`
/// from the start: each is initialised in float32 as always, then narrowed at once, so a model
/// built under the scope never holds all of its linear weights in float32 (a 7B Llama's 24 GiB).
/// Loading a checkpoint into them rounds as store_frozen_weights would have later: the same
/// values. For weights that will be frozen; scopes nest, the innermost deciding.
class LinearStorageScope {
 public:
  /// Throws InputError for a dtype other than float32, bfloat16 and float16.
  explicit LinearStorageScope(torch::Dtype dtype);
  ~LinearStorageScope();
  LinearStorageScope(const LinearStorageScope&) = delete;
  LinearStorageScope& operator=(const LinearStorageScope&) = delete;

 private:
  std::optional<torch::Dtype> previous_;
};

/// `x` through each of `layers`, which read the same input (a Llama's q, k and v projections):
/// as one node (nn::native_bf16_linears: the same results, fewer passes in backward) where none
/// has an adapter, each stores its weight (out, in) and the products run under CPU bf16 autocast
/// on the native kernels; through each layer's forward() otherwise.
/// x (..., in) -> (..., out_j) for each layer j
std::vector<torch::Tensor> adapted_linears(const torch::Tensor& x,
                                           const std::vector<AdaptedLinearImpl*>& layers);

/// Which layers get adapters, and their size.
struct LoraOptions {
  TORCH_ARG(int64_t, rank) = 8;
  TORCH_ARG(double, alpha) = 16.0;
  TORCH_ARG(double, dropout) = 0.0;
  /// Module names or their last components ("q_proj" adapts every "...q_proj"), as PEFT's
  /// target_modules.
  TORCH_ARG(std::vector<std::string>, targets) = {};
  /// Modules that stay trainable in full besides the adapters (a fresh classifier head), matched
  /// as `targets`; PEFT's modules_to_save.
  TORCH_ARG(std::vector<std::string>, trainable) = {};
};

/// Adds an adapter to every AdaptedLinear of `module` that options.targets names and freezes every
/// other parameter (requires_grad false: no gradient, no optimizer state) except those of the
/// options.trainable modules. Returns the adapted modules' names. Throws InputError naming a
/// target or trainable pattern that matches no module (a typo must not train nothing), or a
/// target that is not an AdaptedLinear.
std::vector<std::string> apply_lora(torch::nn::Module& module, const LoraOptions& options);

/// Stores the frozen (requires_grad false) weight and bias of every AdaptedLinear in `module` in
/// `dtype`: bfloat16 or float16 halve the memory of the base weights while adapters and
/// everything trainable stay as they are. Outside autocast, forward widens them to the
/// activations' dtype for the product. Returns the bytes freed (negative when widening).
/// Throws InputError for a dtype other than float32, bfloat16 and float16.
int64_t store_frozen_weights(torch::nn::Module& module, torch::Dtype dtype);

}  // namespace bigbatch::nn
