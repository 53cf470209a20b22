#include "bigbatch/cli/option_keys.h"

#include <cctype>

namespace bigbatch::cli {

const std::vector<std::pair<std::string, std::string>>& option_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"TrainerOptions.total_steps", "train.steps"},
      {"TrainerOptions.eval_every", "train.eval_every"},
      {"TrainerOptions.eval_samples", "train.eval_samples"},
      {"TrainerOptions.max_consecutive_skips", "train.max_consecutive_skips"},
      {"TrainerOptions.prefetch_depth", "train.prefetch_depth"},
      {"TrainerOptions.checkpoint_every", "checkpoint.every"},
      {"TrainerOptions.concurrent_micro_batches", "train.concurrent_micro_batches"},
      {"AccumulatorOptions.max_grad_norm", "optim.max_grad_norm"},
      {"AccumulatorOptions.on_nonfinite", "train.on_nonfinite"},
      {"CheckpointOptions.keep", "checkpoint.keep"},
      {"LossScalerOptions.init_scale", "loss_scale.init_scale"},
      {"LossScalerOptions.growth_factor", "loss_scale.growth_factor"},
      {"LossScalerOptions.backoff_factor", "loss_scale.backoff_factor"},
      {"LossScalerOptions.growth_interval", "loss_scale.growth_interval"},
      {"LossScalerOptions.min_scale", "loss_scale.min_scale"},
      {"LrScheduleOptions.warmup_steps", "schedule.warmup_steps"},
      {"LrScheduleOptions.min_lr_ratio", "schedule.min_lr_ratio"},
      {"BatchOptions.global_batch", "batch.global_batch"},
      {"BatchOptions.micro_batch", "batch.micro_batch"},
      {"BatchOptions.accum_steps", "batch.accum_steps"},
      {"BatchOptions.base_batch", "optim.base_batch"},
      {"BatchOptions.base_lr", "optim.lr"},
      {"OptimizerOptions.lr", "optim.lr"},
      {"OptimizerOptions.weight_decay", "optim.weight_decay"},
      {"OptimizerOptions.beta1", "optim.beta1"},
      {"OptimizerOptions.beta2", "optim.beta2"},
      {"OptimizerOptions.eps", "optim.eps"},
      {"OptimizerOptions.momentum", "optim.momentum"},
      {"OptimizerOptions.nesterov", "optim.nesterov"},
      {"OptimizerOptions.kernel", "optim.kernel"},
      {"TrainingJobOptions.attention", "model.attention"},
      {"MicroBatchSearchOptions.budget_bytes", "memory.budget"},
      {"TrainingJobOptions.memory_budget", "memory.budget"},
      {"the memory budget", "memory.budget"},
      {"GptOptions.context", "gpt.context"},
      {"GptOptions.layers", "gpt.layers"},
      {"GptOptions.heads", "gpt.heads"},
      {"GptOptions.embed", "gpt.embed"},
      {"GptOptions.dropout", "gpt.dropout"},
      {"MlpOptions.context", "mlp.context"},
      {"MlpOptions.embed", "mlp.embed"},
      {"MlpOptions.hidden", "mlp.hidden"},
      {"MlpOptions.layers", "mlp.layers"},
      {"MlpOptions.dropout", "mlp.dropout"},
      {"ResNetOptions.depth", "resnet.depth"},
      {"ResNetOptions.width", "resnet.width"},
      {"BertOptions.context", "bert.context"},
      {"BertOptions.layers", "bert.layers"},
      {"BertOptions.heads", "bert.heads"},
      {"BertOptions.embed", "bert.embed"},
      {"BertOptions.dropout", "bert.dropout"},
      {"LoraOptions.targets", "adapter.targets"},
      {"LoraOptions.trainable", "adapter.trainable"},
      {"LoraOptions.rank", "adapter.rank"},
      {"LoraOptions.alpha", "adapter.alpha"},
      {"LoraOptions.dropout", "adapter.dropout"},
  };
  return keys;
}

std::string with_names_replaced(std::string message,
                                const std::vector<std::pair<std::string, std::string>>& names) {
  const auto continues_a_name = [&message](size_t at) {
    return at < message.size() &&
           (std::isalnum(static_cast<unsigned char>(message[at])) || message[at] == '_');
  };
  for (const auto& [field, key] : names) {
    size_t at = message.find(field);
    while (at != std::string::npos) {
      if (continues_a_name(at + field.size())) {
        at = message.find(field, at + field.size());  // a longer name that starts the same
        continue;
      }
      message.replace(at, field.size(), key);
      at = message.find(field, at + key.size());
    }
  }
  return message;
}

std::string with_config_keys(std::string message) {
  return with_names_replaced(std::move(message), option_keys());
}

}  // namespace bigbatch::cli
