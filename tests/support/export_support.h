// Small models of every kind for the export tests: specs, a few training steps so that nothing is
// at its initial value (BatchNorm running statistics included), and inputs.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/models/model_export.h"
#include "bigbatch/models/model_spec.h"

namespace bigbatch::testing {

/// A small spec of `kind` (the resnet with `norm`): gpt 2 layers of width 16, context 16; mlp
/// context 4; resnet-8 of width 4 on 3x8x8 images with per-channel mean and std, 5 classes;
/// bert 2 layers of width 16, context 12, dropout 0.1, classes "art", "law", "zippy".
inline models::ModelSpec small_spec(models::ModelKind kind,
                                    nn::NormKind norm = nn::NormKind::kBatch) {
  models::ModelSpec spec;
  spec.kind = kind;
  spec.gpt = models::GptOptions().context(16).layers(2).heads(2).embed(16);
  spec.mlp = models::MlpOptions().context(4).embed(8).hidden(16).layers(2);
  spec.resnet = models::ResNetOptions().depth(8).width(4).in_channels(3).classes(5).norm(norm);
  spec.image = {3, 8, 8, {0.5, 0.4, 0.3}, {0.25, 0.2, 0.3}};
  spec.bert = models::BertOptions().context(12).layers(2).heads(2).embed(16).classes(3);
  if (kind == models::ModelKind::kResnet)
    spec.class_names = {"0", "1", "2", "3", "4"};
  if (kind == models::ModelKind::kBert)
    spec.class_names = {"art", "law", "zippy"};
  return spec;
}

/// A batch of `batch` inputs for the model of `spec` from `seed`: byte ids (the bert's padded at
/// the end with pad_id, by a different amount per row) or images in the model's dtype.
inline torch::Tensor sample_inputs(const models::ModelSpec& spec, int64_t batch, uint64_t seed) {
  torch::manual_seed(seed);
  switch (spec.kind) {
    case models::ModelKind::kGpt:
      return torch::randint(0, 256, {batch, spec.gpt.context()}, torch::kLong);
    case models::ModelKind::kMlp:
      return torch::randint(0, 256, {batch, spec.mlp.context()}, torch::kLong);
    case models::ModelKind::kResnet:
      return torch::randn({batch, spec.image.channels, spec.image.height, spec.image.width},
                          torch::TensorOptions().dtype(spec.dtype()));
    case models::ModelKind::kBert: {
      const int64_t context = spec.bert.context();
      torch::Tensor ids = torch::randint(0, 256, {batch, context}, torch::kLong);
      for (int64_t b = 0; b < batch; ++b)
        ids[b].slice(0, context - (b * 3) % context).fill_(spec.bert.pad_id());
      return ids;
    }
  }
  return {};
}

/// The model of `spec` built from `seed` and trained for two SGD steps in training mode on
/// random targets (so weights, and BatchNorm running statistics, moved), returned in eval mode.
inline models::BuiltModel trained_model(const models::ModelSpec& spec, uint64_t seed) {
  torch::manual_seed(seed);
  models::BuiltModel model = models::build_model(spec);
  torch::optim::SGD sgd(model.module->parameters(), torch::optim::SGDOptions(0.1));
  model.module->train();
  for (uint64_t step = 0; step < 2; ++step) {
    const torch::Tensor inputs = sample_inputs(spec, 6, seed + 100 + step);
    const torch::Tensor logits = model.forward(inputs);  // (B, [T,] V)
    const int64_t classes = logits.size(-1);
    const torch::Tensor flat = logits.reshape({-1, classes});
    const torch::Tensor targets = torch::randint(0, classes, {flat.size(0)}, torch::kLong);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(flat, targets).backward();
    sgd.step();
  }
  model.module->eval();
  return model;
}

/// Expects `found` to hold `expected`'s parameters and buffers: the same names in state_dict
/// order (models::state_tensors), each of the same dtype, requires_grad and bitwise value.
inline void expect_same_state(const torch::nn::Module& found, const torch::nn::Module& expected) {
  const auto found_tensors = models::state_tensors(found);
  const auto expected_tensors = models::state_tensors(expected);
  ASSERT_EQ(found_tensors.size(), expected_tensors.size());
  for (size_t i = 0; i < found_tensors.size(); ++i) {
    const auto& [name, tensor] = found_tensors[i];
    EXPECT_EQ(name, expected_tensors[i].first);
    EXPECT_EQ(tensor.scalar_type(), expected_tensors[i].second.scalar_type()) << name;
    EXPECT_EQ(tensor.requires_grad(), expected_tensors[i].second.requires_grad()) << name;
    EXPECT_TRUE(torch::equal(tensor, expected_tensors[i].second)) << name;
  }
}

}  // namespace bigbatch::testing
