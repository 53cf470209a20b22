// models::HfBert as ELECTRA against Hugging Face transformers: the tiny random ELECTRA classifier
// of tests/hf/make_tiny_bert.py (embeddings of 16 projected to the width of 32, token types, a
// padded row), google/electra-base-discriminator's layout (an ElectraForPreTraining: its head
// skipped and reported, the classifier fresh), and the padding skipped against computed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bigbatch/models/hf_bert.h"
#include "bigbatch/models/hf_model.h"
#include "models/hf_encoder_checks.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using testing::encoded;
using testing::encoder_golden;
using testing::hf_dir;

TEST(HfElectra, HiddenStatesLogitsAndLossAreThoseOfTransformers) {
  LoadedHfBert loaded = load_hf_bert(hf_dir("tiny-electra"));
  EXPECT_TRUE(loaded.fresh.empty());
  EXPECT_TRUE(loaded.unused.empty());
  HfBert model = loaded.model;
  ASSERT_TRUE(model->config().is_electra());
  EXPECT_EQ(model->config().embedding_width(), 16);
  EXPECT_EQ(model->word_embeddings->weight.sizes(), (std::vector<int64_t>{500, 16}));
  EXPECT_EQ(model->embeddings_project->weight.sizes(), (std::vector<int64_t>{32, 16}));
  const testing::EncoderGolden g = encoder_golden("tiny-electra-golden.json");
  ASSERT_TRUE(g.types.defined());
  testing::expect_transformers_outputs(model, g);
}

TEST(HfElectra, TheDiscriminatorsCheckpointLoadsWithoutItsHeadAndWithAFreshClassifier) {
  const testing::EncoderGolden g = encoder_golden("tiny-electra-golden.json");
  LoadedHfBert discriminator = load_hf_bert(hf_dir("tiny-electra-discriminator"), 3);
  EXPECT_EQ(discriminator.fresh,
            (std::vector<std::string>{"classifier.dense.weight", "classifier.dense.bias",
                                      "classifier.out_proj.weight", "classifier.out_proj.bias"}));
  EXPECT_EQ(discriminator.unused,
            (std::vector<std::string>{"discriminator_predictions.dense.bias",
                                      "discriminator_predictions.dense.weight",
                                      "discriminator_predictions.dense_prediction.bias",
                                      "discriminator_predictions.dense_prediction.weight"}));
  HfBert classifier = load_hf_bert(hf_dir("tiny-electra")).model;
  EXPECT_TRUE(torch::equal(encoded(discriminator.model, g), encoded(classifier, g)));
  const HfModel model = load_hf_model(hf_dir("tiny-electra-discriminator"), 2);
  EXPECT_EQ(model.trained_heads(), std::vector<std::string>{"classifier"});
  EXPECT_EQ(model.describe(), "electra: 2 layers, width 32, 4 heads, vocabulary 500, 2 classes");
  EXPECT_EQ(model.lookup_parameters(), (500 + 32 + 2) * 16);  // words, positions, types
}

TEST(HfElectra, SkippingThePaddingGivesTheLogitsAndGradientsOfThePaddedEncoder) {
  torch::manual_seed(8);
  HfBert model(testing::small_encoder_config("electra").embedding_size(16));
  const torch::Tensor lengths = torch::tensor({12, 5, 2, 9}, torch::kLong);
  const torch::Tensor mask = torch::arange(12).unsqueeze(0).lt(lengths.unsqueeze(1));  // (4, 12)
  const torch::Tensor ids = torch::randint(1, 99, {4, 12}, torch::kLong).mul(mask);    // pad 0
  testing::expect_skipped_padding_exact(model, ids, mask);
}

TEST(HfElectraConfig, EmbeddingSizeIsReadAndTheSummaryFieldsIgnored) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-electra") + "/config.json"));
  ASSERT_TRUE(config.contains("summary_type"));
  io::HfConfig reader(config, "config.json");
  EXPECT_EQ(read_hf_bert_config(reader).embedding_size(), 16);
  config["embedding_size"] = 0;
  io::HfConfig zero(config, "config.json");
  EXPECT_EQ(testing::input_error_of([&] { read_hf_bert_config(zero); }),
            "config.json: embedding_size = 0 must be >= 1");
  config["embedding_size"] = 16;
  config["hidden_act"] = "gelu_new";
  io::HfConfig other(config, "config.json");
  testing::expect_contains(testing::input_error_of([&] { read_hf_bert_config(other); }),
                           {"unsupported \"hidden_act\": \"gelu_new\""});
}

}  // namespace
}  // namespace bigbatch::models
