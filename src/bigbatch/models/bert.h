// A BERT-style byte-level encoder classifier (pre-LayerNorm, bidirectional self-attention with
// a key padding mask, a learned [CLS] vector whose final state is classified).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// Hyper-parameters of Bert. Usage: `Bert model(BertOptions().classes(4).layers(4));`
struct BertOptions {
  /// Number of distinct tokens, the pad id included (256 bytes + 1 pad).
  TORCH_ARG(int64_t, vocab) = 257;
  /// The token id that marks padding, in [0, vocab); padded positions are never attended to.
  TORCH_ARG(int64_t, pad_id) = 256;
  /// Longest input the model accepts, T (the position table has context + 1 rows: [CLS] too).
  TORCH_ARG(int64_t, context) = 256;
  /// Number of encoder blocks.
  TORCH_ARG(int64_t, layers) = 2;
  /// Attention heads per block; must divide `embed`.
  TORCH_ARG(int64_t, heads) = 4;
  /// Width of the residual stream.
  TORCH_ARG(int64_t, embed) = 128;
  /// Number of classes the head scores.
  TORCH_ARG(int64_t, classes) = 2;
  /// Dropout probability in [0, 1) on embeddings, attention probabilities and residual outputs.
  TORCH_ARG(double, dropout) = 0.1;
};

/// Throws bigbatch::InputError naming the field and its value unless every size is positive,
/// pad_id lies in [0, vocab), `embed` is divisible by `heads` and dropout lies in [0, 1).
void validate(const BertOptions& options);

/// BERT-style sequence classifier over bytes:
///   [CLS] + tokens, + positions -> dropout -> blocks -> ln_f on [CLS] -> head.
/// The input's T tokens get positions 1..T behind a learned [CLS] vector at position 0. Pad
/// tokens (`pad_id`) are masked out as attention keys in every block, so they influence nothing
/// the head sees; [CLS] is never masked, so every query has a key and a fully padded row gives
/// finite logits (those of [CLS] alone). Pooling is the final state of [CLS], not a mean over
/// tokens. With pads at the end, a sequence's logits do not depend on how many pads follow it
/// (up to rounding in the reductions).
/// Submodules: `tok_embed`, `pos_embed`, `blocks.<i>`, `ln_f`, `head`; parameter `cls`.
/// Initialised like BERT / GPT-2: Linear and Embedding weights and `cls` N(0, 0.02), biases 0,
/// LayerNorm weight 1 and bias 0.
/// Activation checkpointing (off by default) recomputes the chosen blocks during backward (the
/// padding mask is captured, it needs no gradient); gradients and dropout draws stay
/// bit-identical:
///   model->set_checkpointing(nn::parse_checkpoint_policy("blocks", "checkpointing"));
class BertImpl : public torch::nn::Module {
 public:
  /// Builds and initialises the model; validates `options` first.
  explicit BertImpl(BertOptions options = {});

  /// inputs (B, T) int64 token ids in [0, vocab) with 1 <= T <= context, padded with pad_id
  /// -> logits (B, classes). Throws bigbatch::InputError for other shapes, dtypes or ids.
  /// In training mode with grad mode on, block i runs under nn::checkpoint when the
  /// checkpointing policy applies to i.
  torch::Tensor forward(const torch::Tensor& inputs);

  /// Chooses which blocks forward() checkpoints; throws bigbatch::InputError for an invalid
  /// policy (see nn::validate). Do not switch train()/eval() between a checkpointed forward and
  /// its backward.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }

  /// Re-draws every parameter with the initialisation described above.
  void reset_parameters();

  /// The options the model was built with.
  const BertOptions& options() const { return options_; }

  /// Embedding(vocab, embed) of the tokens.
  torch::nn::Embedding tok_embed{nullptr};
  /// Embedding(context + 1, embed) of the positions 0 ([CLS]) .. T.
  torch::nn::Embedding pos_embed{nullptr};
  /// The learned [CLS] vector (embed), a parameter.
  torch::Tensor cls;
  /// The `layers` PreLnBlock modules (transformer_parts), applied in order.
  torch::nn::ModuleList blocks{nullptr};
  /// Final LayerNorm(embed), applied to the [CLS] state.
  torch::nn::LayerNorm ln_f{nullptr};
  /// Linear(embed, classes) producing the logits.
  torch::nn::Linear head{nullptr};

 private:
  BertOptions options_;
  nn::CheckpointPolicy checkpointing_;
};
/// Module holder for BertImpl.
TORCH_MODULE(Bert);

}  // namespace bigbatch::models
