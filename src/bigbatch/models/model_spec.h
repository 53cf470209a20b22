// A model spec: everything that decides a built-in model's structure, forward math and input
// preprocessing, as JSON, so that the same module can be rebuilt without the training data.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "bigbatch/models/bert.h"
#include "bigbatch/models/gpt.h"
#include "bigbatch/models/mlp.h"
#include "bigbatch/models/model_kind.h"
#include "bigbatch/models/resnet.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// The preprocessing of ResNet inputs: uint8 images of channels x height x width, scaled to
/// [0, 1] and normalised per channel, as data::ImageDataset does: (pixel / 255 - mean[c]) /
/// std[c], in float32.
struct ImageInputSpec {
  int64_t channels = 1;           ///< C
  int64_t height = 0;             ///< H of the training images
  int64_t width = 0;              ///< W of the training images
  std::vector<double> mean{0.0};  ///< one value for all channels, or one per channel
  std::vector<double> std{1.0};   ///< one value for all channels, or one per channel; each > 0
};

/// A built-in model as data: kind, the options of that kind, dtype, classes and preprocessing.
/// Text models read bytes (ids 0..255): the GPT and the MLP up to their `context` bytes; the BERT
/// the first `context` bytes of a text, padded at the end with `pad_id` to exactly `context`
/// (data::FortuneDataset). Only the options of `kind` are meaningful.
struct ModelSpec {
  ModelKind kind = ModelKind::kGpt;
  GptOptions gpt;        ///< kind gpt
  MlpOptions mlp;        ///< kind mlp
  ResNetOptions resnet;  ///< kind resnet (norm after model.norm_policy = "group")
  BertOptions bert;      ///< kind bert
  bool float64 = false;  ///< parameter dtype: float64, or else float32
  /// Class names by label, as many as the classifier's classes; empty for gpt and mlp.
  std::vector<std::string> class_names;
  ImageInputSpec image;  ///< kind resnet

  /// torch::kFloat64 or torch::kFloat32.
  torch::Dtype dtype() const { return float64 ? torch::kFloat64 : torch::kFloat32; }
  /// Number of classes (resnet, bert) or 0 (gpt, mlp).
  int64_t classes() const;
};

/// The spec as JSON, keys in this order (ordered_json), for example
///   {"format": "bigbatch-model", "version": 1, "kind": "resnet", "dtype": "float32",
///    "options": {"depth": 8, "width": 16, "norm": "batch", "in_channels": 1, "classes": 10},
///    "input": {"type": "image", "channels": 1, "height": 28, "width": 28, "scale": 255,
///              "mean": [0.286], "std": [0.353]},
///    "classes": ["T-shirt/top", ...]}
/// Text models have "input": {"type": "bytes", "context": T} and the BERT also "pad_id";
/// "classes" is there for classifiers only.
nlohmann::ordered_json spec_to_json(const ModelSpec& spec);

/// Reads what spec_to_json writes (keys in any order). Throws InputError starting with `origin` and
/// naming the field for a missing or mistyped field, an unknown kind, dtype or norm, options the
/// model rejects (see validate), a class-name count other than the classes, or an input
/// section that does not agree with the options.
ModelSpec spec_from_json(const nlohmann::ordered_json& json, const std::string& origin);

/// A model built from a spec: the module, its typed holder (one of gpt, mlp, resnet, bert is set)
/// and its forward pass.
struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  Gpt gpt{nullptr};
  Mlp mlp{nullptr};
  ResNet resnet{nullptr};
  Bert bert{nullptr};
  /// inputs -> logits: (B, T) bytes -> (B, T, vocab) for the GPT, (B, context) -> (B, vocab) for
  /// the MLP, (B, C, H, W) -> (B, classes) for the ResNet, (B, T) -> (B, classes) for the BERT.
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

/// Builds the spec's model, initialised from the current torch seed (drawing exactly what the
/// model's constructor draws), its floating-point parameters and buffers converted to the spec's
/// dtype (integer buffers such as BatchNorm's num_batches_tracked stay int64, as in PyTorch), in
/// training mode. The same spec and
/// seed give the same parameter names, shapes and values.
BuiltModel build_model(const ModelSpec& spec);

/// Sets the activation checkpointing of the GPT, ResNet or BERT in `model`; the MLP has no
/// blocks, and only CheckpointMode::kNone is accepted for it (InputError otherwise).
void set_checkpointing(BuiltModel& model, const nn::CheckpointPolicy& policy);

}  // namespace bigbatch::models
