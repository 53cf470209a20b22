#include "bigbatch/models/gpt.h"

#include <cmath>
#include <memory>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"

namespace bigbatch::models {
namespace {

/// Standard deviation of every Linear and Embedding weight (GPT-2).
constexpr double kInitStd = 0.02;

}  // namespace

void validate(const GptOptions& options) {
  BB_CHECK_INPUT(options.vocab() > 0, "GptOptions.vocab must be positive, got ", options.vocab());
  BB_CHECK_INPUT(options.context() > 0, "GptOptions.context must be positive, got ",
                 options.context());
  BB_CHECK_INPUT(options.layers() > 0, "GptOptions.layers must be positive, got ",
                 options.layers());
  BB_CHECK_INPUT(options.heads() > 0, "GptOptions.heads must be positive, got ", options.heads());
  BB_CHECK_INPUT(options.embed() > 0, "GptOptions.embed must be positive, got ", options.embed());
  BB_CHECK_INPUT(options.embed() % options.heads() == 0, "GptOptions.embed (", options.embed(),
                 ") must be divisible by GptOptions.heads (", options.heads(), ")");
  BB_CHECK_INPUT(options.dropout() >= 0.0 && options.dropout() < 1.0,
                 "GptOptions.dropout must be in [0, 1), got ", options.dropout());
}

GptImpl::GptImpl(GptOptions options) : options_(options) {
  validate(options_);
  const int64_t embed = options_.embed();
  tok_embed = register_module("tok_embed", torch::nn::Embedding(options_.vocab(), embed));
  pos_embed = register_module("pos_embed", torch::nn::Embedding(options_.context(), embed));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.layers(); ++i) {
    blocks->push_back(PreLnBlock(
        BlockOptions().embed(embed).heads(options_.heads()).dropout(options_.dropout())));
  }
  ln_f = register_module("ln_f", layer_norm(embed));
  head = register_module(
      "head", torch::nn::Linear(torch::nn::LinearOptions(embed, options_.vocab()).bias(false)));
  reset_parameters();
}

void GptImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
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
  // Residual projections are scaled down so the residual stream's variance does not grow with
  // depth (GPT-2 paper, section 2.3).
  const double residual_std = kInitStd / std::sqrt(2.0 * double(options_.layers()));
  for (const auto& module : *blocks) {
    auto* block = module->as<PreLnBlock>();
    torch::nn::init::normal_(block->attn->proj->weight, 0.0, residual_std);
    torch::nn::init::normal_(block->mlp->proj->weight, 0.0, residual_std);
  }
}

void GptImpl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor GptImpl::forward(const torch::Tensor& inputs) {
  BB_CHECK_INPUT(inputs.dim() == 2, "Gpt expects inputs of shape (B, T) but got ", inputs.sizes());
  const int64_t time = inputs.size(1);
  BB_CHECK_INPUT(time >= 1 && time <= options_.context(), "Gpt input length T = ", time,
                 " is outside [1, GptOptions.context = ", options_.context(), "]");
  BB_CHECK_INPUT(inputs.scalar_type() == torch::kLong, "Gpt expects int64 token ids but got ",
                 inputs.scalar_type());
  const torch::Tensor positions =
      torch::arange(time, torch::TensorOptions().dtype(torch::kLong).device(inputs.device()));
  torch::Tensor x = tok_embed->forward(inputs) + pos_embed->forward(positions);  // (B, T, C)
  x = maybe_dropout(x, options_.dropout(), is_training());
  const nn::AttentionMask causal{/*causal=*/true, /*padding=*/{}};
  const bool may_checkpoint = is_training() && torch::GradMode::is_enabled();
  for (size_t i = 0; i < blocks->size(); ++i) {
    std::shared_ptr<PreLnBlockImpl> block = blocks->ptr<PreLnBlockImpl>(i);
    if (may_checkpoint && checkpointing_.applies_to(int64_t(i))) {
      const std::vector<torch::Tensor> parameters = block->parameters();
      x = nn::checkpoint(
          [block, causal](const torch::Tensor& in) { return block->forward(in, causal); }, x,
          parameters);  // (B, T, C)
    } else {
      x = block->forward(x, causal);  // (B, T, C)
    }
  }
  return nn::linear(head, ln_f->forward(x));  // (B, T, vocab)
}

}  // namespace bigbatch::models
