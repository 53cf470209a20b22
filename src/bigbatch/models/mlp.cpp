#include "bigbatch/models/mlp.h"

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_matmul.h"

namespace bigbatch::models {

void validate(const MlpOptions& options) {
  BB_CHECK_INPUT(options.vocab() > 0, "MlpOptions.vocab must be positive, got ", options.vocab());
  BB_CHECK_INPUT(options.context() > 0, "MlpOptions.context must be positive, got ",
                 options.context());
  BB_CHECK_INPUT(options.embed() > 0, "MlpOptions.embed must be positive, got ", options.embed());
  BB_CHECK_INPUT(options.hidden() > 0, "MlpOptions.hidden must be positive, got ",
                 options.hidden());
  BB_CHECK_INPUT(options.layers() > 0, "MlpOptions.layers must be positive, got ",
                 options.layers());
  BB_CHECK_INPUT(options.dropout() >= 0.0 && options.dropout() < 1.0,
                 "MlpOptions.dropout must be in [0, 1), got ", options.dropout());
}

MlpImpl::MlpImpl(MlpOptions options) : options_(options) {
  validate(options_);
  tok_embed =
      register_module("tok_embed", torch::nn::Embedding(options_.vocab(), options_.embed()));
  hidden = register_module("hidden", torch::nn::ModuleList());
  int64_t in_features = options_.context() * options_.embed();
  for (int64_t i = 0; i < options_.layers(); ++i) {
    hidden_layers_.emplace_back(in_features, options_.hidden());
    hidden->push_back(hidden_layers_.back());
    in_features = options_.hidden();
  }
  head = register_module("head", torch::nn::Linear(options_.hidden(), options_.vocab()));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& inputs) {
  BB_CHECK_INPUT(inputs.dim() == 2 && inputs.size(1) == options_.context(),
                 "Mlp expects inputs of shape (B, ", options_.context(), ") but got ",
                 inputs.sizes());
  BB_CHECK_INPUT(inputs.scalar_type() == torch::kLong, "Mlp expects int64 token ids but got ",
                 inputs.scalar_type());
  const int64_t batch = inputs.size(0);
  torch::Tensor x = tok_embed->forward(inputs);  // (B, context, embed)
  x = x.reshape({batch, -1});                    // (B, context * embed)
  for (auto& layer : hidden_layers_) {
    x = torch::tanh(nn::linear(layer, x));  // (B, hidden)
    if (options_.dropout() > 0.0) {
      x = torch::dropout(x, options_.dropout(), is_training());
    }
  }
  return nn::linear(head, x);  // (B, vocab)
}

}  // namespace bigbatch::models
