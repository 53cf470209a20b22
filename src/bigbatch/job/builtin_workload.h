// The built-in models (models::ModelKind) on their default data: options, data loading and the
// workload a TrainingJob trains.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/core/threads.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/text_corpus.h"
#include "bigbatch/engine/norm_policy.h"
#include "bigbatch/job/workload.h"
#include "bigbatch/models/model_spec.h"
#include "bigbatch/models/sampling.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::job {

/// Where a model's training passes run, as far as running several at once cares.
struct PassSite {
  nn::Precision precision = nn::Precision::kFp32;  ///< the forward's autocast
  c10::DeviceType device = c10::kCPU;
};

/// Which built-in model, and how it is built.
struct BuiltinModelOptions {
  models::ModelKind kind = models::ModelKind::kGpt;
  models::GptOptions gpt;
  models::MlpOptions mlp;
  models::ResNetOptions resnet;
  models::BertOptions bert;
  engine::NormPolicy norm_policy = engine::NormPolicy::kKeep;  ///< BatchNorm under accumulation
  bool float64 = false;                ///< parameter dtype: float64, or else float32
  nn::CheckpointPolicy checkpointing;  ///< activation checkpointing of the block models
  /// A safetensors file of every parameter and buffer under its PyTorch name (an export, a
  /// state_dict saved with safetensors) that the model starts from; empty: a fresh
  /// initialisation from the torch seed (see models::load_weights).
  std::string init_from;
  std::string prompt = "The ";   ///< what the GPT's final sample continues
  models::SampleOptions sample;  ///< the GPT's final sample; max_new_bytes 0 = none
};

/// IDX images and labels, the data of the ResNet.
struct IdxDataOptions {
  std::string train_images;
  std::string train_labels;
  std::string test_images;
  std::string test_labels;
  int64_t subsample = 0;  ///< training images used (a seeded subset); 0 = all
};

/// Where the built-in models' data come from.
struct BuiltinDataOptions {
  data::TextCorpusOptions text;              ///< gpt and mlp
  IdxDataOptions idx;                        ///< resnet
  data::FortuneCollectionsOptions fortunes;  ///< bert
  uint64_t seed = 1;                         ///< seeds subsamples and held-out splits
};

/// The data a model kind trains on, read once; build_builtin_workload cuts the datasets from it.
struct LoadedData {
  std::shared_ptr<const data::TextCorpus> corpus;  ///< gpt and mlp
  std::shared_ptr<const data::Dataset> train;      ///< resnet and bert: the training split
  std::shared_ptr<const data::Dataset> test;       ///< resnet and bert: the held-out split
  int64_t classes = 0;                             ///< resnet and bert: classes of the labels
  int64_t in_channels = 0;                         ///< resnet: image channels
  /// resnet and bert: class names by label (Fashion-MNIST's ten names for its default files,
  /// the collection names, or "0".."N-1")
  std::vector<std::string> class_names;
  std::string description;  ///< the source, for the plan table
};

/// Reads the data of `kind`: the text corpus (gpt, mlp), the IDX training and test files
/// (resnet) or the fortune collections (bert). Throws InputError naming the file and the cause.
LoadedData load_builtin_data(models::ModelKind kind, const BuiltinDataOptions& options);

/// The spec of the model `options` describes on `data`: the kind's options with what the data
/// decides (classes and their names, image channels, the BERT's context), the resnet norm after
/// norm_policy = group, the dtype, and the image size and normalisation of the training split.
models::ModelSpec describe_model(const BuiltinModelOptions& options, const LoadedData& data);

/// The built-in model (initialised from the current torch seed, then from options.init_from where
/// set, in its dtype, with its checkpointing and norm policy), its training and validation datasets
/// from `data`, its loss, plan-table rows, spec and (GPT) final sample. The validation split is
/// left out when it is too small to hold one sample.
Workload build_builtin_workload(const BuiltinModelOptions& options, const LoadedData& data,
                                const PassSite& site);

/// What the built-in model of `options`, trained at `site`, lacks to run several training passes
/// at once (engine::TrainerOptions::concurrent_micro_batches > 1), as the clause after "needs",
/// naming the keys to change: its training forwards must not draw dropout masks, and its
/// BatchNorms must compute the statistics they write themselves (nn::BatchNorm: the fused kernel,
/// CPU float32 without autocast, or model.norm_policy = "ghost"). Empty when it has nothing to
/// change.
std::string concurrency_need(const BuiltinModelOptions& options, const PassSite& site);

/// The matmul backend the model's fp32 work runs on: oneDNN for the ResNet's convolutions,
/// BLAS otherwise (TrainingJob switches to oneDNN for native bf16 products).
MatmulBackend builtin_backend(models::ModelKind kind);

}  // namespace bigbatch::job
