// models::HfBert as DistilBERT against Hugging Face transformers: the tiny random DistilBERT
// classifier of tests/hf/make_tiny_bert.py (its names, no token types, pre_classifier + ReLU),
// distilbert-base-uncased's layout (a masked-LM checkpoint: its head skipped and reported, the
// classifier fresh), the padding skipped against computed, and its config read and refused by
// DistilBERT's own field names.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "bigbatch/models/hf_bert.h"
#include "bigbatch/models/hf_model.h"
#include "models/hf_encoder_checks.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using testing::hf_dir;

using testing::encoded;
using testing::encoder_golden;

TEST(HfDistilBert, HiddenStatesLogitsAndLossAreThoseOfTransformers) {
  const testing::EncoderGolden g = encoder_golden("tiny-distilbert-golden.json");
  LoadedHfBert loaded = load_hf_bert(hf_dir("tiny-distilbert"));
  EXPECT_TRUE(loaded.fresh.empty());
  EXPECT_TRUE(loaded.unused.empty());
  HfBert model = loaded.model;
  ASSERT_TRUE(model->config().is_distilbert());
  EXPECT_TRUE(model->token_type_embeddings.is_empty());
  testing::expect_transformers_outputs(model, g);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(
      testing::input_error_of([&] { model->forward(g.ids, g.mask, torch::zeros_like(g.ids)); }),
      "DistilBERT has no token types; pass no token_type_ids");
}

TEST(HfDistilBert, AMaskedLmCheckpointLoadsWithoutItsHeadAndWithAFreshClassifier) {
  const testing::EncoderGolden g = encoder_golden("tiny-distilbert-golden.json");
  LoadedHfBert mlm = load_hf_bert(hf_dir("tiny-distilbert-mlm"), 3);
  EXPECT_EQ(mlm.fresh, (std::vector<std::string>{"pre_classifier.weight", "pre_classifier.bias",
                                                 "classifier.weight", "classifier.bias"}));
  EXPECT_EQ(mlm.unused,
            (std::vector<std::string>{"vocab_layer_norm.bias", "vocab_layer_norm.weight",
                                      "vocab_projector.bias", "vocab_transform.bias",
                                      "vocab_transform.weight"}));
  HfBert classifier = load_hf_bert(hf_dir("tiny-distilbert")).model;
  EXPECT_TRUE(torch::equal(encoded(mlm.model, g), encoded(classifier, g)));
  const HfModel model = load_hf_model(hf_dir("tiny-distilbert-mlm"), 3);
  EXPECT_EQ(model.trained_heads(), (std::vector<std::string>{"pre_classifier", "classifier"}));
  EXPECT_EQ(model.describe(), "distilbert: 2 layers, width 32, 4 heads, vocabulary 500, 3 classes");
  EXPECT_EQ(model.dropouts(), "dropout 0.1, attention_dropout 0.1, seq_classif_dropout 0.2");
  EXPECT_EQ(model.lookup_parameters(), 500 * 32 + 32 * 32);  // words and positions
  // Another number of classes replaces the classifier and keeps pre_classifier.
  EXPECT_EQ(load_hf_bert(hf_dir("tiny-distilbert"), 5).fresh,
            (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
}

TEST(HfDistilBert, SkippingThePaddingGivesTheLogitsAndGradientsOfThePaddedEncoder) {
  torch::manual_seed(7);
  HfBert model(testing::small_encoder_config("distilbert").type_vocab_size(0));
  const torch::Tensor lengths = torch::tensor({12, 5, 2, 9}, torch::kLong);
  const torch::Tensor mask = torch::arange(12).unsqueeze(0).lt(lengths.unsqueeze(1));  // (4, 12)
  const torch::Tensor ids = torch::randint(1, 99, {4, 12}, torch::kLong).mul(mask);    // pad 0
  testing::expect_skipped_padding_exact(model, ids, mask);
}

std::string config_error(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-distilbert") + "/config.json"));
  edit(config);
  io::HfConfig reader(config, "config.json");
  return testing::input_error_of([&] { read_hf_bert_config(reader); });
}

TEST(HfDistilBertConfig, ItsOwnFieldNamesAreReadAndUnsupportedSettingsNamed) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-distilbert") + "/config.json"));
  // Fields of older fine-tuned checkpoints (distilbert-base-uncased-finetuned-sst-2-english).
  config["finetuning_task"] = "sst-2";
  config["output_past"] = true;
  config["dropout"] = 0.25;
  io::HfConfig reader(config, "config.json");
  const HfBertConfig read = read_hf_bert_config(reader);
  EXPECT_EQ(read.hidden_size(), 32);
  EXPECT_EQ(read.intermediate_size(), 64);
  EXPECT_EQ(read.num_attention_heads(), 4);
  EXPECT_EQ(read.type_vocab_size(), 0);
  EXPECT_EQ(read.hidden_dropout_prob(), 0.25);
  EXPECT_EQ(read.classifier_dropout(), 0.2);
  EXPECT_EQ(read.layer_norm_eps(), 1e-12);
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["activation"] = "relu"; }),
            "config.json: unsupported \"activation\": \"relu\" (bigbatch supports only \"gelu\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["sinusoidal_pos_embds"] = true; }),
            "config.json: unsupported \"sinusoidal_pos_embds\": true (bigbatch supports only "
            "false)");
  EXPECT_EQ(config_error([](nlohmann::json& c) {
              c["pruned_heads"] = {{"0", {1}}};
            }),
            "config.json: unsupported \"pruned_heads\": {\"0\":[1]} (bigbatch supports only {})");
  testing::expect_contains(config_error([](nlohmann::json& c) { c["hidden_size"] = 32; }),
                           {"unsupported field(s) for DistilBERT "
                            "(DistilBertForSequenceClassification): \"hidden_size\" = 32"});
}

}  // namespace
}  // namespace bigbatch::models
