// Checks the encoder classifiers' tests share (models::HfBert as BERT, RoBERTa, DistilBERT and
// ELECTRA; models::HfModernBert): transformers' golden outputs, and the padding skipped against
// computed.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/models/hf_bert.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::testing {

/// A golden file of tests/hf/make_tiny_bert.py: ids and mask (B, T), and transformers' outputs.
struct EncoderGolden {
  nlohmann::json json;
  torch::Tensor ids, mask;  ///< (B, T) int64
  torch::Tensor types;      ///< (B, T) int64, or undefined where the file has none
};

inline EncoderGolden encoder_golden(const std::string& name) {
  EncoderGolden g;
  g.json = nlohmann::json::parse(read_file(hf_dir(name)));
  g.ids = int_rows(g.json["input_ids"]);
  g.mask = int_rows(g.json["attention_mask"]);
  if (g.json.contains("token_type_ids"))
    g.types = int_rows(g.json["token_type_ids"]);
  return g;
}

/// The last hidden state in eval mode -> (B, T, C)
inline torch::Tensor encoded(models::HfBert& model, const EncoderGolden& g) {
  model->eval();
  torch::NoGradGuard no_grad;
  return model->encode(g.ids, g.mask, g.types);
}

/// The last hidden state within 1e-5 of transformers', and logits and loss within 1e-6, with the
/// padding skipped and computed.
inline void expect_transformers_outputs(models::HfBert& model, const EncoderGolden& g) {
  const auto floats = [](const nlohmann::json& value) {
    return torch::tensor(value.get<std::vector<double>>(), torch::kFloat);
  };
  const torch::Tensor expected_hidden =
      floats(g.json["last_hidden_state"]).view(g.json["hidden_shape"].get<std::vector<int64_t>>());
  EXPECT_LE((encoded(model, g) - expected_hidden).abs().max().item<double>(), 1e-5);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected_logits = floats(g.json["logits"]).view({g.ids.size(0), -1});
  for (const bool skip : {true, false}) {
    model->set_skip_padding(skip);
    const torch::Tensor logits = model->forward(g.ids, g.mask, g.types);  // (B, labels)
    EXPECT_LE((logits - expected_logits).abs().max().item<double>(), 1e-6) << skip;
    const torch::Tensor loss = torch::cross_entropy_loss(
        logits, torch::tensor(g.json["labels"].get<std::vector<int64_t>>()));
    EXPECT_NEAR(loss.item<double>(), g.json["loss"].get<double>(), 1e-6) << skip;
  }
  model->set_skip_padding(true);
}

/// A small encoder of `model_type` without dropout: vocabulary 99, width 32, 2 layers of 4 heads,
/// 16 positions, 3 labels; training passes repeat exactly.
inline models::HfBertConfig small_encoder_config(const std::string& model_type) {
  return models::HfBertConfig()
      .model_type(model_type)
      .vocab_size(99)
      .hidden_size(32)
      .num_hidden_layers(2)
      .num_attention_heads(4)
      .intermediate_size(64)
      .max_position_embeddings(16)
      .hidden_dropout_prob(0.0)
      .attention_probs_dropout_prob(0.0)
      .classifier_dropout(0.0)
      .num_labels(3);
}

/// In training mode (the model without dropout), the logits and every parameter's gradient with
/// the padding skipped equal those of the padded encoder within 1e-5 of the largest. `Model` is
/// models::HfBert or models::HfModernBert.
template <typename Model>
void expect_skipped_padding_exact(Model& model, const torch::Tensor& ids,
                                  const torch::Tensor& mask) {
  const auto pass = [&](bool skip) {
    model->set_skip_padding(skip);
    model->train();
    model->zero_grad();
    const torch::Tensor logits = model->forward(ids, mask);  // (B, labels)
    (logits * torch::linspace(-1.0, 2.0, logits.numel()).view(logits.sizes())).sum().backward();
    std::vector<torch::Tensor> values = {logits.detach()};
    for (const torch::Tensor& parameter : model->parameters())
      values.push_back(parameter.grad().clone());
    return values;
  };
  const std::vector<torch::Tensor> skipped = pass(true), computed = pass(false);
  ASSERT_EQ(skipped.size(), computed.size());
  double largest = 0.0;
  for (const torch::Tensor& t : computed)
    largest = std::max(largest, t.abs().max().item<double>());
  for (size_t i = 0; i < skipped.size(); ++i)
    EXPECT_LE((skipped[i] - computed[i]).abs().max().item<double>(), 1e-5 * largest) << i;
  model->set_skip_padding(true);
}

}  // namespace bigbatch::testing
