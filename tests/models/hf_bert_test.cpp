// models::HfBert against Hugging Face transformers: the tiny random BERT classifier that
// tests/hf/make_tiny_bert.py made (padding, token types), the same encoder saved as a BertModel
// (no classifier: initialised afresh and reported), the padding skipped against computed, and
// unsupported configs named.
#include "bigbatch/models/hf_bert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using testing::hf_dir;

struct Golden {
  nlohmann::json json;
  torch::Tensor ids, mask, types;
};

Golden golden() {
  Golden g;
  g.json = nlohmann::json::parse(testing::read_file(hf_dir("tiny-bert-golden.json")));
  g.ids = testing::int_rows(g.json["input_ids"]);
  g.mask = testing::int_rows(g.json["attention_mask"]);
  g.types = testing::int_rows(g.json["token_type_ids"]);
  return g;
}

TEST(HfBert, HiddenStatesLogitsAndLossAreThoseOfTransformers) {
  const Golden g = golden();
  LoadedHfBert loaded = load_hf_bert(hf_dir("tiny-bert"));
  EXPECT_TRUE(loaded.fresh.empty());
  HfBert model = loaded.model;
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor hidden = model->encode(g.ids, g.mask, g.types);  // (B, T, C)
  const torch::Tensor expected_hidden =
      torch::tensor(g.json["last_hidden_state"].get<std::vector<double>>(), torch::kFloat)
          .view(g.json["hidden_shape"].get<std::vector<int64_t>>());
  // Padding positions too: their queries attend the real keys, as in transformers.
  EXPECT_LE((hidden - expected_hidden).abs().max().item<double>(), 1e-5);
  const torch::Tensor logits = model->forward(g.ids, g.mask, g.types);  // (B, 3)
  const torch::Tensor expected_logits =
      torch::tensor(g.json["logits"].get<std::vector<double>>(), torch::kFloat).view({2, 3});
  EXPECT_LE((logits - expected_logits).abs().max().item<double>(), 1e-6);
  const torch::Tensor loss = torch::cross_entropy_loss(
      logits, torch::tensor(g.json["labels"].get<std::vector<int64_t>>()));
  EXPECT_NEAR(loss.item<double>(), g.json["loss"].get<double>(), 1e-6);
  // The padded row's real positions do not see what stands in the padding.
  torch::Tensor other_padding = g.ids.clone();
  other_padding.index_put_({1, torch::indexing::Slice(6)}, 7);
  EXPECT_LE((model->forward(other_padding, g.mask, g.types) - logits).abs().max().item<double>(),
            1e-6);
}

TEST(HfBert, AnEncoderWithoutClassifierGetsAFreshHeadOfTheDatasLabels) {
  const Golden g = golden();
  LoadedHfBert encoder = load_hf_bert(hf_dir("tiny-bert-encoder"), 5);
  EXPECT_EQ(encoder.fresh, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(encoder.model->head_output->weight.size(0), 5);
  LoadedHfBert classifier = load_hf_bert(hf_dir("tiny-bert"));
  encoder.model->eval();
  classifier.model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(encoder.model->encode(g.ids, g.mask, g.types),
                           classifier.model->encode(g.ids, g.mask, g.types)));
}

TEST(HfBert, AClassifierForOtherClassesIsReplacedAndTheSameClassesKept) {
  LoadedHfBert same = load_hf_bert(hf_dir("tiny-bert"), 3);
  EXPECT_TRUE(same.fresh.empty());
  LoadedHfBert other = load_hf_bert(hf_dir("tiny-bert"), 7);
  EXPECT_EQ(other.fresh, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(other.model->head_output->weight.sizes(), (std::vector<int64_t>{7, 32}));
  EXPECT_TRUE(torch::equal(other.model->head_dense->weight, same.model->head_dense->weight));
}

/// Logits of `model` and the gradients of every parameter for the sum of the logits times fixed
/// weights, in training mode.
struct Pass {
  torch::Tensor logits;
  std::vector<torch::Tensor> grads;
};

Pass train_pass(HfBert& model, const torch::Tensor& ids, const torch::Tensor& mask) {
  model->train();
  model->zero_grad();
  Pass pass;
  pass.logits = model->forward(ids, mask);  // (B, 3)
  (pass.logits * torch::linspace(-1.0, 2.0, pass.logits.numel()).view(pass.logits.sizes()))
      .sum()
      .backward();
  for (const torch::Tensor& parameter : model->parameters())
    pass.grads.push_back(parameter.grad().clone());
  return pass;
}

/// Each gradient within `tolerance` of the largest gradient element (the keys' biases have
/// gradients of rounding size only: softmax ignores what every key adds alike).
void expect_close(const Pass& skipped, const Pass& computed, double tolerance) {
  EXPECT_LE(testing::relative_difference(skipped.logits, computed.logits), tolerance);
  ASSERT_EQ(skipped.grads.size(), computed.grads.size());
  double largest = 0.0;
  for (const torch::Tensor& grad : computed.grads)
    largest = std::max(largest, grad.abs().max().item<double>());
  for (size_t i = 0; i < skipped.grads.size(); ++i) {
    EXPECT_LE((skipped.grads[i] - computed.grads[i]).abs().max().item<double>(),
              tolerance * largest)
        << "parameter " << i;
  }
}

/// A random BERT of 3 layers without dropout: training passes repeat exactly.
HfBert bert_without_dropout() {
  torch::manual_seed(2);
  return HfBert(HfBertConfig()
                    .vocab_size(99)
                    .hidden_size(32)
                    .num_hidden_layers(3)
                    .num_attention_heads(4)
                    .intermediate_size(64)
                    .hidden_dropout_prob(0.0)
                    .attention_probs_dropout_prob(0.0)
                    .classifier_dropout(0.0)
                    .num_labels(3));
}

TEST(HfBert, SkippingThePaddingGivesTheLogitsAndGradientsOfThePaddedEncoder) {
  HfBert model = bert_without_dropout();
  model->set_checkpointing(nn::parse_checkpoint_policy("every:2", "hf.checkpointing"));
  torch::manual_seed(3);
  const torch::Tensor lengths = torch::tensor({12, 5, 2, 9, 1}, torch::kLong);
  const torch::Tensor mask = torch::arange(12).unsqueeze(0).lt(lengths.unsqueeze(1));  // (5, 12)
  const torch::Tensor ids = torch::randint(1, 99, {5, 12}, torch::kLong).mul(mask);    // pad 0
  ASSERT_TRUE(model->skip_padding());
  const Pass skipped = train_pass(model, ids, mask);
  model->set_skip_padding(false);
  const Pass computed = train_pass(model, ids, mask);
  expect_close(skipped, computed, 1e-5);
  // Not the same computation: with the padding's embedding NaN, the padded encoder multiplies it
  // by its keys' zero probabilities, which gives NaN; the packed one never reads it.
  {
    torch::NoGradGuard no_grad;
    model->word_embeddings->weight[0].fill_(std::numeric_limits<float>::quiet_NaN());
  }
  EXPECT_FALSE(torch::isfinite(model->forward(ids, mask)).all().item<bool>());
  model->set_skip_padding(true);
  EXPECT_TRUE(torch::isfinite(model->forward(ids, mask)).all().item<bool>());
}

TEST(HfBert, PaddingBeforeTheFirstTokenIsComputed) {
  HfBert model = bert_without_dropout();
  torch::manual_seed(4);
  const torch::Tensor ids = torch::randint(1, 99, {2, 10}, torch::kLong);
  // Left padding: transformers pools position 0 whatever it holds.
  torch::Tensor left = torch::ones({2, 10}, torch::kLong);
  left.index_put_({1, torch::indexing::Slice(0, 4)}, 0);
  const Pass skipped = train_pass(model, ids, left);
  model->set_skip_padding(false);
  const Pass computed = train_pass(model, ids, left);
  EXPECT_TRUE(torch::equal(skipped.logits, computed.logits));
  for (size_t i = 0; i < skipped.grads.size(); ++i)
    EXPECT_TRUE(torch::equal(skipped.grads[i], computed.grads[i])) << i;
}

TEST(HfBert, WithoutPaddingOnlyTheLastLayerIsShortenedToTheSameLogits) {
  HfBert model = bert_without_dropout();
  torch::manual_seed(5);
  const torch::Tensor ids = torch::randint(1, 99, {3, 8}, torch::kLong);
  const torch::Tensor mask = torch::ones({3, 8}, torch::kLong);
  const Pass skipped = train_pass(model, ids, mask);
  model->set_skip_padding(false);
  const Pass computed = train_pass(model, ids, mask);
  expect_close(skipped, computed, 1e-5);
}

std::string config_error(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-bert") + "/config.json"));
  edit(config);
  io::HfConfig reader(config, "config.json");
  return testing::input_error_of([&] { read_hf_bert_config(reader); });
}

TEST(HfBertConfig, UnsupportedSettingsAreNamed) {
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["position_embedding_type"] = "relative_key"; }),
            "config.json: unsupported \"position_embedding_type\": \"relative_key\" (bigbatch "
            "supports only \"absolute\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["hidden_act"] = "gelu_new"; }),
            "config.json: unsupported \"hidden_act\": \"gelu_new\" (bigbatch supports only "
            "\"gelu\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["problem_type"] = "regression"; }),
            "config.json: unsupported \"problem_type\": \"regression\" (bigbatch supports only "
            "\"single_label_classification\")");
  EXPECT_NE(config_error([](nlohmann::json& c) { c["rotary"] = true; })
                .find("unsupported field(s) for BERT (BertForSequenceClassification): "
                      "\"rotary\" = true"),
            std::string::npos);
}

}  // namespace
}  // namespace bigbatch::models
