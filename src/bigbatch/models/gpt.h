// A GPT-2-style byte-level decoder-only transformer (pre-LayerNorm, causal self-attention).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// Hyper-parameters of Gpt. Usage: `Gpt model(GptOptions().layers(6).embed(256));`
struct GptOptions {
  /// Number of distinct tokens (256 for raw bytes).
  TORCH_ARG(int64_t, vocab) = 256;
  /// Longest sequence the model accepts (size of the position table).
  TORCH_ARG(int64_t, context) = 64;
  /// Number of transformer blocks.
  TORCH_ARG(int64_t, layers) = 4;
  /// Attention heads per block; must divide `embed`.
  TORCH_ARG(int64_t, heads) = 4;
  /// Width of the residual stream.
  TORCH_ARG(int64_t, embed) = 128;
  /// Dropout probability in [0, 1) on embeddings, attention probabilities and residual outputs.
  TORCH_ARG(double, dropout) = 0.0;
};

/// Throws bigbatch::InputError naming the field and its value unless every size is positive,
/// `embed` is divisible by `heads` and dropout lies in [0, 1).
void validate(const GptOptions& options);

/// GPT-2-style language model over bytes:
///   tok_embed + pos_embed -> dropout -> blocks -> ln_f -> head.
/// Submodules (names mirrored by the Python golden-value script): `tok_embed`, `pos_embed`,
/// `blocks.<i>`, `ln_f`, `head` (no bias, not tied to `tok_embed`).
/// Initialised like GPT-2 / nanoGPT: Linear and Embedding weights N(0, 0.02), biases 0,
/// LayerNorm weight 1 and bias 0, residual projections (`attn.proj`, `mlp.proj`)
/// N(0, 0.02 / sqrt(2 * layers)).
/// Activation checkpointing (off by default) trades one extra forward per checkpointed block for
/// the memory of its activations; gradients and random draws stay bit-identical:
///   model->set_checkpointing(nn::parse_checkpoint_policy("every:2", "checkpointing"));
class GptImpl : public torch::nn::Module {
 public:
  /// Builds and initialises the model; validates `options` first.
  explicit GptImpl(GptOptions options = {});

  /// inputs (B, T) int64 token ids with 1 <= T <= context -> logits (B, T, vocab), where
  /// position t predicts token t + 1. Throws bigbatch::InputError for other shapes or dtypes.
  /// In training mode with grad mode on, block i runs under nn::checkpoint when the
  /// checkpointing policy applies to i; otherwise every block is called directly.
  torch::Tensor forward(const torch::Tensor& inputs);

  /// Chooses which blocks forward() checkpoints; throws bigbatch::InputError for an invalid
  /// policy (see nn::validate). Do not switch train()/eval() between a checkpointed forward and
  /// its backward: the recompute would run in the other mode.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }

  /// Re-draws every parameter with the GPT-2 initialisation described above.
  void reset_parameters();

  /// The options the model was built with.
  const GptOptions& options() const { return options_; }

  /// Embedding(vocab, embed) of the tokens.
  torch::nn::Embedding tok_embed{nullptr};
  /// Embedding(context, embed) of the positions 0..T-1.
  torch::nn::Embedding pos_embed{nullptr};
  /// The `layers` PreLnBlock modules (transformer_parts), applied in order.
  torch::nn::ModuleList blocks{nullptr};
  /// Final LayerNorm(embed).
  torch::nn::LayerNorm ln_f{nullptr};
  /// Linear(embed, vocab, bias=false) producing the logits.
  torch::nn::Linear head{nullptr};

 private:
  GptOptions options_;
  nn::CheckpointPolicy checkpointing_;
};
/// Module holder for GptImpl.
TORCH_MODULE(Gpt);

}  // namespace bigbatch::models
