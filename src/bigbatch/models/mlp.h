// A byte-level n-gram MLP language model in the style of Bengio et al. (2003).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace bigbatch::models {

/// Hyper-parameters of Mlp. Usage: `Mlp model(MlpOptions().context(16).hidden(512));`
struct MlpOptions {
  /// Number of distinct input tokens (256 for raw bytes).
  TORCH_ARG(int64_t, vocab) = 256;
  /// Number of preceding tokens the model sees to predict the next one.
  TORCH_ARG(int64_t, context) = 8;
  /// Width of each token's embedding.
  TORCH_ARG(int64_t, embed) = 32;
  /// Width of every hidden layer.
  TORCH_ARG(int64_t, hidden) = 256;
  /// Number of hidden Linear + tanh layers (at least 1).
  TORCH_ARG(int64_t, layers) = 2;
  /// Dropout probability after each hidden activation, in [0, 1); 0 disables it.
  TORCH_ARG(double, dropout) = 0.0;
};

/// Throws bigbatch::InputError naming the field and its value unless every size is positive
/// and dropout lies in [0, 1).
void validate(const MlpOptions& options);

/// Predicts the next token from a fixed window of `context` tokens:
///   embed each token, concatenate, (Linear -> tanh -> dropout) x layers, Linear head.
/// Submodules (names mirrored by the Python golden-value script): `tok_embed`, `hidden.<i>`,
/// `head`. Parameters keep PyTorch's default initialisation.
class MlpImpl : public torch::nn::Module {
 public:
  /// Builds the layers; validates `options` first.
  explicit MlpImpl(MlpOptions options = {});

  /// inputs (B, context) int64 token ids -> logits (B, vocab) for the token that follows.
  /// Throws bigbatch::InputError for any other shape or dtype.
  torch::Tensor forward(const torch::Tensor& inputs);

  /// The options the model was built with.
  const MlpOptions& options() const { return options_; }

  /// Embedding(vocab, embed).
  torch::nn::Embedding tok_embed{nullptr};
  /// The hidden Linear layers: context*embed -> hidden, then hidden -> hidden.
  torch::nn::ModuleList hidden{nullptr};
  /// Linear(hidden, vocab) producing the logits.
  torch::nn::Linear head{nullptr};

 private:
  MlpOptions options_;
  std::vector<torch::nn::Linear> hidden_layers_;  // the entries of `hidden`, typed
};

/// Module holder for MlpImpl (shared ownership, `model->forward(x)`).
TORCH_MODULE(Mlp);

}  // namespace bigbatch::models
