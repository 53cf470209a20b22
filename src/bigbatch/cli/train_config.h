// The `bigbatch train` configuration: every key, its default and its meaning, in one place.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/text_corpus.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/lr_schedule.h"
#include "bigbatch/engine/norm_policy.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/models/bert.h"
#include "bigbatch/models/gpt.h"
#include "bigbatch/models/mlp.h"
#include "bigbatch/models/resnet.h"
#include "bigbatch/models/sampling.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/checkpoint.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::cli {

/// Which built-in model to train.
enum class ModelKind {
  kGpt,     ///< byte-level GPT: next byte of a text corpus
  kMlp,     ///< n-gram MLP: next byte of a text corpus
  kResnet,  ///< CIFAR-style ResNet: image classes (Fashion-MNIST or any IDX pair)
  kBert,    ///< BERT-style encoder: which fortune collection a fortune comes from
};

/// IDX images and labels, the data of the ResNet.
struct IdxDataConfig {
  std::string train_images;
  std::string train_labels;
  std::string test_images;
  std::string test_labels;
  int64_t subsample = 0;  ///< training images used (a seeded subset); 0 = all
};

/// Whether the loss is scaled dynamically (`loss_scale.mode`).
enum class LossScaleMode {
  kAuto,     ///< only where fp16 is in use (model.precision = "fp16")
  kDynamic,  ///< always, in any precision (to rehearse it, or for fp16 run another way)
  kOff,      ///< never
};

/// Everything `bigbatch train` needs, read from TOML and overrides.
struct TrainConfig {
  ModelKind model = ModelKind::kGpt;
  models::GptOptions gpt;
  models::MlpOptions mlp;
  models::ResNetOptions resnet;
  models::BertOptions bert;
  engine::NormPolicy norm_policy = engine::NormPolicy::kKeep;  ///< BatchNorm under accumulation
  data::TextCorpusOptions data;                                ///< gpt and mlp
  IdxDataConfig idx;                                           ///< resnet
  data::FortuneCollectionsOptions fortunes;                    ///< bert
  engine::BatchOptions batch;
  engine::OptimizerOptions optim;
  double max_grad_norm = 1.0;
  LossScaleMode loss_scale = LossScaleMode::kAuto;
  engine::LossScalerOptions loss_scaler;  ///< used when loss_scaling_enabled()
  engine::NonFinitePolicy on_nonfinite = engine::NonFinitePolicy::kSkip;
  int64_t max_consecutive_skips = 0;   ///< skipped windows in a row that stop the run
  engine::LrScheduleOptions schedule;  ///< peak_lr and total_steps are filled in from the plan
  int64_t steps = 0;                   ///< optimizer steps; 0 when epochs is given
  int64_t epochs = 0;                  ///< passes over the training split; 0 when steps is given
  int64_t eval_every = 0;
  int64_t eval_samples = 0;
  int64_t log_every = 10;
  uint64_t seed = 1;
  int64_t threads = 0;         ///< OpenMP intra-op threads; 0 = automatic (per precision)
  int64_t blas_threads = 0;    ///< OpenBLAS threads; 0 = automatic (per precision)
  int64_t prefetch_depth = 8;  ///< micro-batches gathered ahead on a background thread; 0 = off
  int64_t concurrent_micro_batches = 1;  ///< micro-batches of a window run at once, one per thread
  bool float64 = false;
  nn::Precision precision = nn::Precision::kFp32;      ///< compute precision of forward passes
  nn::Bf16Matmul bf16_matmul = nn::Bf16Matmul::kAuto;  ///< kernels of bf16 products on the CPU
  nn::CheckpointPolicy checkpointing;  ///< activation checkpointing of the chosen block model
  bool auto_micro_batch = false;       ///< batch.micro_batch = "auto"
  int64_t memory_budget = 0;           ///< bytes of tensor memory allowed; 0 = unlimited
  std::string run_dir;                 ///< empty = runs/<model>-<timestamp>
  std::string prompt;
  models::SampleOptions sample;
  int64_t checkpoint_every = 0;  ///< optimizer steps between checkpoints (and after the last)
  int64_t checkpoint_keep = 0;   ///< newest checkpoint files kept
  double dist_timeout = 0.0;     ///< data parallel: seconds before a stuck collective fails
  std::string dist_backend;      ///< data parallel: "auto", "gloo" or "nccl"
  int64_t bucket_bytes = 0;      ///< data parallel: gradient bytes per all-reduce bucket
  std::string resolved_toml;     ///< the whole configuration in effect, as TOML
  /// Every key and its value in effect as TOML text, to compare a resumed run's config.
  std::vector<std::pair<std::string, std::string>> resolved_values;
};

/// Reads every key from `config` (defaults for those absent), then rejects unknown keys.
/// Throws InputError naming the key and value for wrong types and values out of range.
TrainConfig read_train_config(ConfigReader& config);

/// The config spelling of a model kind.
std::string to_string(ModelKind kind);

/// Whether training uses a LossScaler: loss_scale.mode = "dynamic", or "auto" with
/// model.precision = "fp16".
bool loss_scaling_enabled(const TrainConfig& config);

}  // namespace bigbatch::cli
