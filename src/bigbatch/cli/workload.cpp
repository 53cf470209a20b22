#include "bigbatch/cli/workload.h"

#include <numeric>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/data/context_dataset.h"
#include "bigbatch/data/sequence_dataset.h"
#include "bigbatch/models/mlp.h"

namespace bigbatch::cli {

TrainConfig load_config(const TrainCommandOptions& options) {
  ConfigReader reader =
      options.config_path.empty() ? ConfigReader() : ConfigReader::from_file(options.config_path);
  for (const std::string& assignment : options.overrides)
    reader.set_override(assignment);
  return read_train_config(reader);
}

Workload build_workload(const TrainConfig& config, const data::TextCorpus& corpus) {
  Workload w;
  const auto dtype = config.float64 ? torch::kFloat64 : torch::kFloat32;
  if (config.model == ModelKind::kGpt) {
    w.gpt = models::Gpt(config.gpt);
    w.gpt->to(dtype);
    w.gpt->set_checkpointing(config.checkpointing);
    w.module = w.gpt.ptr();
    const auto options = data::SequenceDatasetOptions(config.gpt.context());
    w.train = std::make_unique<data::SequenceDataset>(
        corpus.train_shared(), data::SequenceDatasetOptions(options).name("train"));
    if (corpus.val().size() >= 2) {  // one input byte and its target
      w.val = std::make_unique<data::SequenceDataset>(
          corpus.val_shared(), data::SequenceDatasetOptions(options).name("validation"));
    }
    w.objective = std::make_unique<engine::CrossEntropyObjective>(
        engine::forward_of(w.gpt), engine::LossUnit::kToken, options.ignore_index());
  } else {
    models::Mlp mlp(config.mlp);
    mlp->to(dtype);
    w.module = mlp.ptr();
    const auto options = data::ContextDatasetOptions(config.mlp.context());
    w.train = std::make_unique<data::ContextDataset>(
        corpus.train_shared(), data::ContextDatasetOptions(options).name("train"));
    if (corpus.val().size() > static_cast<size_t>(config.mlp.context())) {
      w.val = std::make_unique<data::ContextDataset>(
          corpus.val_shared(), data::ContextDatasetOptions(options).name("validation"));
    }
    w.objective = std::make_unique<engine::CrossEntropyObjective>(engine::forward_of(mlp),
                                                                  engine::LossUnit::kSample);
  }
  if (config.precision != nn::Precision::kFp32) {
    w.objective = std::make_unique<engine::AutocastObjective>(std::move(w.objective),
                                                              config.precision, torch::kCPU);
  }
  return w;
}

ThreadSettings apply_thread_settings(const TrainConfig& config) {
  return apply_threads(ThreadRequest()
                           .backend(config.precision == nn::Precision::kFp32
                                        ? MatmulBackend::kBlas
                                        : MatmulBackend::kOneDnn)
                           .openmp(config.threads)
                           .blas(config.blas_threads));
}

engine::TrainingSetup TrainingParts::setup(const Workload& w, const engine::Plan& plan) const {
  engine::TrainingSetup setup;
  setup.model = w.module.get();
  setup.objective = w.objective.get();
  setup.optimizer = optimizer.get();
  setup.schedule = schedule.get();
  setup.plan = &plan;
  setup.train_data = w.train.get();
  setup.val_data = w.val.get();
  setup.loss_scaler = loss_scaler.get();
  return setup;
}

TrainingParts make_training_parts(const TrainConfig& config, const Workload& w,
                                  const engine::Plan& plan, int64_t steps) {
  TrainingParts parts;
  parts.optimizer =
      engine::make_optimizer(*w.module, engine::OptimizerOptions(config.optim).lr(plan.lr));
  parts.schedule = std::make_unique<engine::LrSchedule>(
      engine::LrScheduleOptions(config.schedule).peak_lr(plan.lr).total_steps(steps));
  if (loss_scaling_enabled(config))
    parts.loss_scaler = std::make_unique<engine::LossScaler>(config.loss_scaler);
  parts.options = engine::TrainerOptions()
                      .total_steps(steps)
                      .eval_every(config.eval_every)
                      .eval_samples(config.eval_samples)
                      .seed(config.seed)
                      .max_grad_norm(config.max_grad_norm)
                      .on_nonfinite(config.on_nonfinite)
                      .max_consecutive_skips(config.max_consecutive_skips);
  return parts;
}

int64_t optimizer_state_bytes(const TrainConfig& config, const torch::nn::Module& module) {
  int64_t parameter_bytes = 0;
  for (const torch::Tensor& parameter : module.parameters()) {
    parameter_bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
  }
  if (config.optim.kind() == engine::OptimizerKind::kAdamW)
    return 2 * parameter_bytes;
  return config.optim.momentum() > 0 ? parameter_bytes : 0;
}

engine::MicroBatchSearchResult search_micro_batch(const TrainConfig& config, const Workload& w,
                                                  int64_t global_batch) {
  const RngState rng = RngState::capture(torch::kCPU);
  const bool was_training = w.module->is_training();
  w.module->train(true);
  auto trial = [&](int64_t micro_batch) {
    // As from the second micro-batch of a window on: the gradients of the earlier ones are held
    // through the whole pass and the new ones are added to them.
    for (torch::Tensor& parameter : w.module->parameters()) {
      if (parameter.requires_grad())
        parameter.mutable_grad() = torch::zeros_like(parameter);
    }
    std::vector<int64_t> indices(static_cast<size_t>(micro_batch));
    std::iota(indices.begin(), indices.end(), 0);
    const data::Batch batch = w.train->get(indices);
    w.objective->loss_sum(batch).backward();
    for (torch::Tensor& parameter : w.module->parameters())
      parameter.mutable_grad().reset();
  };
  engine::MicroBatchSearchResult found = engine::find_micro_batch(
      trial, engine::MicroBatchSearchOptions()
                 .global_batch(global_batch)
                 .budget_bytes(config.memory_budget)
                 .reserved_bytes(optimizer_state_bytes(config, *w.module)));
  w.module->train(was_training);
  rng.restore();
  return found;
}

engine::Plan even_plan(engine::BatchOptions batch, int64_t largest_micro_batch) {
  const int64_t global = batch.global_batch();
  const int64_t passes = (global + largest_micro_batch - 1) / largest_micro_batch;
  batch.accum_steps(0);
  return engine::resolve_plan(batch.micro_batch((global + passes - 1) / passes));
}

}  // namespace bigbatch::cli
