// What `bigbatch train` and `bigbatch bench` build from a config: model, data, objective, plan.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "bigbatch/cli/model_spec.h"
#include "bigbatch/cli/train_command.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/text_corpus.h"
#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/lr_schedule.h"
#include "bigbatch/engine/micro_batch_search.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/gpt.h"

namespace bigbatch::cli {

/// Reads the config file (or the built-in defaults) and applies the overrides, in order.
TrainConfig load_config(const TrainCommandOptions& options);

/// The data a config names, read once; build_workload cuts the datasets from it.
struct LoadedData {
  std::shared_ptr<const data::TextCorpus> corpus;  ///< gpt and mlp
  std::shared_ptr<const data::Dataset> train;      ///< resnet and bert: the training split
  std::shared_ptr<const data::Dataset> test;       ///< resnet and bert: the held-out split
  int64_t classes = 0;                             ///< resnet and bert: classes of the labels
  int64_t in_channels = 0;                         ///< resnet: image channels
  std::string description;                         ///< the source, for the plan table
};

/// Reads the model's data: the text corpus (gpt, mlp), the IDX training and test files
/// (resnet) or the fortune collections (bert). Throws InputError naming the file and the cause.
LoadedData load_data(const TrainConfig& config);

/// The model, its datasets and its objective, built from the config.
struct Workload {
  std::shared_ptr<torch::nn::Module> module;
  models::Gpt gpt{nullptr};  ///< set for the GPT (for sampling and checkpointing)
  ModelSpec spec;            ///< what the module was built from (build_model(spec)), for export
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> val;  ///< null when the validation split is too small
  std::unique_ptr<engine::Objective> objective;
  int64_t batch_norms = 0;  ///< BatchNorm layers in the model (see model.norm_policy)
  /// Keeps BatchNorm running statistics per window under model.norm_policy = "ghost"; null
  /// otherwise. Hand it to the trainer (TrainingParts::setup does).
  std::shared_ptr<engine::WindowHooks> window_hooks;
  std::string description;  ///< the model in one line, for the plan table
};

/// Builds the model (initialised from the current torch seed, in the configured dtype, with the
/// configured checkpointing and norm policy), the training and validation datasets from `data`,
/// and the loss (under autocast when model.precision is not fp32: every forward pass through the
/// objective, training, evaluation and the micro-batch search, runs in that precision).
Workload build_workload(const TrainConfig& config, const LoadedData& data);

/// Applies model.bf16_matmul (nn::set_bf16_matmul), then train.threads and train.blas_threads,
/// automatic ones chosen for the matmul backend that model.precision and those kernels use and
/// this machine's cores shared by `processes` ranks, each running train.concurrent_micro_batches
/// passes at once, and returns the settings in effect.
ThreadSettings apply_thread_settings(const TrainConfig& config, int64_t processes = 1);

/// What a training run needs besides the workload: optimizer, schedule, loss scaler and loop
/// settings, built from the config. Held by pointer so that setup() stays valid if this moves.
struct TrainingParts {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<engine::LrSchedule> schedule;
  std::unique_ptr<engine::LossScaler> loss_scaler;  ///< null when loss scaling is off
  engine::TrainerOptions options;

  /// The trainer's view of `w`, these parts and `plan` (which must outlive the trainer).
  engine::TrainingSetup setup(const Workload& w, const engine::Plan& plan) const;
};

/// Builds the parts for `steps` optimizer steps of `plan` (its lr peaks the schedule).
TrainingParts make_training_parts(const TrainConfig& config, const Workload& w,
                                  const engine::Plan& plan, int64_t steps);

/// Bytes of optimizer state that exist from the first step on: two moments per parameter
/// (AdamW) or one momentum buffer (SGD with momentum).
int64_t optimizer_state_bytes(const TrainConfig& config, const torch::nn::Module& module);

/// Runs the micro-batch search under config.memory_budget with forward + backward trials on the
/// first training samples (with gradients already held, as inside a window; with
/// train.concurrent_micro_batches = N, N passes' graphs and gradients at once), leaving the model,
/// its gradients and the random generators as they were. The memory tracker must be installed.
engine::MicroBatchSearchResult search_micro_batch(const TrainConfig& config, const Workload& w,
                                                  int64_t global_batch);

/// The plan for `global_batch` when at most `largest_micro_batch` samples fit: as many passes
/// as that size needs, with micro-batches as even as possible (64 with room for 21 runs as
/// 4 x 16, not 3 x 21 + 1).
engine::Plan even_plan(engine::BatchOptions batch, int64_t largest_micro_batch);

}  // namespace bigbatch::cli
