#include "bigbatch/models/bert.h"

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"

namespace bigbatch::models {
namespace {

/// Standard deviation of every Linear and Embedding weight and of [CLS] (BERT).
constexpr double kInitStd = 0.02;

}  // namespace

void validate(const BertOptions& options) {
  BB_CHECK_INPUT(options.vocab() > 0, "BertOptions.vocab must be positive, got ", options.vocab());
  BB_CHECK_INPUT(options.pad_id() >= 0 && options.pad_id() < options.vocab(),
                 "BertOptions.pad_id must be in [0, BertOptions.vocab = ", options.vocab(),
                 "), got ", options.pad_id());
  BB_CHECK_INPUT(options.context() > 0, "BertOptions.context must be positive, got ",
                 options.context());
  BB_CHECK_INPUT(options.layers() > 0, "BertOptions.layers must be positive, got ",
                 options.layers());
  BB_CHECK_INPUT(options.heads() > 0, "BertOptions.heads must be positive, got ", options.heads());
  BB_CHECK_INPUT(options.embed() > 0, "BertOptions.embed must be positive, got ", options.embed());
  BB_CHECK_INPUT(options.embed() % options.heads() == 0, "BertOptions.embed (", options.embed(),
                 ") must be divisible by BertOptions.heads (", options.heads(), ")");
  BB_CHECK_INPUT(options.classes() > 0, "BertOptions.classes must be positive, got ",
                 options.classes());
  BB_CHECK_INPUT(options.dropout() >= 0.0 && options.dropout() < 1.0,
                 "BertOptions.dropout must be in [0, 1), got ", options.dropout());
}

BertImpl::BertImpl(BertOptions options) : options_(options) {
  validate(options_);
  const int64_t embed = options_.embed();
  cls = register_parameter("cls", torch::zeros({embed}));
  tok_embed = register_module("tok_embed", torch::nn::Embedding(options_.vocab(), embed));
  pos_embed = register_module("pos_embed", torch::nn::Embedding(options_.context() + 1, embed));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.layers(); ++i) {
    blocks->push_back(PreLnBlock(
        BlockOptions().embed(embed).heads(options_.heads()).dropout(options_.dropout())));
  }
  ln_f = register_module("ln_f", layer_norm(embed));
  head = register_module("head", torch::nn::Linear(embed, options_.classes()));
  reset_parameters();
}

void BertImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(cls, 0.0, kInitStd);
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(linear->weight, 0.0, kInitStd);
      if (linear->bias.defined())
        torch::nn::init::zeros_(linear->bias);
    } else if (auto* embedding = module->as<torch::nn::Embedding>()) {
      torch::nn::init::normal_(embedding->weight, 0.0, kInitStd);
    } else if (auto* norm = module->as<torch::nn::LayerNorm>()) {
      torch::nn::init::ones_(norm->weight);
      torch::nn::init::zeros_(norm->bias);
    }
  }
}

void BertImpl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor BertImpl::forward(const torch::Tensor& inputs) {
  BB_CHECK_INPUT(inputs.dim() == 2, "Bert expects inputs of shape (B, T) but got ", inputs.sizes());
  const int64_t batch = inputs.size(0);
  const int64_t time = inputs.size(1);
  BB_CHECK_INPUT(time >= 1 && time <= options_.context(), "Bert input length T = ", time,
                 " is outside [1, BertOptions.context = ", options_.context(), "]");
  BB_CHECK_INPUT(inputs.scalar_type() == torch::kLong, "Bert expects int64 token ids but got ",
                 inputs.scalar_type());
  if (batch > 0) {
    const auto [low, high] = torch::aminmax(inputs);
    BB_CHECK_INPUT(low.item<int64_t>() >= 0 && high.item<int64_t>() < options_.vocab(),
                   "Bert token ids must be in [0, BertOptions.vocab = ", options_.vocab(),
                   "), got ids from ", low.item<int64_t>(), " to ", high.item<int64_t>());
  }
  const int64_t embed = options_.embed();
  const auto device = inputs.device();
  // [CLS] at position 0 is never padding, so every query has at least one key.
  const nn::AttentionMask key_padding{
      /*causal=*/false,
      /*padding=*/torch::cat(
          {torch::zeros({batch, 1}, torch::TensorOptions().dtype(torch::kBool).device(device)),
           inputs.eq(options_.pad_id())},
          /*dim=*/1)};  // (B, S = T + 1): no query attends to padding
  const torch::Tensor positions =
      torch::arange(time + 1, torch::TensorOptions().dtype(torch::kLong).device(device));  // (S)
  const torch::Tensor cls_column = cls.view({1, 1, embed}).expand({batch, 1, embed});  // (B, 1, C)
  torch::Tensor x = torch::cat({cls_column, tok_embed->forward(inputs)}, /*dim=*/1) +
                    pos_embed->forward(positions);  // (B, S, C)
  x = maybe_dropout(x, options_.dropout(), is_training());
  const bool may_checkpoint = is_training() && torch::GradMode::is_enabled();
  for (size_t i = 0; i < blocks->size(); ++i) {
    std::shared_ptr<PreLnBlockImpl> block = blocks->ptr<PreLnBlockImpl>(i);
    if (may_checkpoint && checkpointing_.applies_to(int64_t(i))) {
      const std::vector<torch::Tensor> parameters = block->parameters();
      x = nn::checkpoint(
          [block, key_padding](const torch::Tensor& in) { return block->forward(in, key_padding); },
          x, parameters);  // (B, S, C)
    } else {
      x = block->forward(x, key_padding);  // (B, S, C)
    }
  }
  const torch::Tensor pooled = ln_f->forward(x.select(/*dim=*/1, /*index=*/0));  // (B, C)
  return nn::linear(head, pooled);                                               // (B, classes)
}

}  // namespace bigbatch::models
