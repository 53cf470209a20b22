// models::HfModernBert against Hugging Face transformers: the tiny random ModernBERT classifier of
// tests/hf/make_tiny_modernbert.py (a global layer, then two local ones over keys at most 2 away;
// a padded row), with cls and mean pooling; answerdotai/ModernBERT-base's layout (a
// ModernBertForMaskedLM: its decoder skipped and reported, the classifier fresh) and the bare
// encoder's; the padding skipped against computed; the config in both of its forms.
#include "bigbatch/models/hf_modernbert.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/models/hf_model.h"
#include "models/hf_encoder_checks.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;
using testing::hf_dir;
using testing::int_rows;

/// tests/hf/tiny-modernbert-golden.json: ids and mask (B, T), and transformers' outputs per
/// pooling ("cls", "mean").
struct Golden {
  nlohmann::json json;
  torch::Tensor ids, mask;  ///< (B, T) int64
};

Golden golden() {
  Golden g;
  g.json = nlohmann::json::parse(testing::read_file(hf_dir("tiny-modernbert-golden.json")));
  g.ids = int_rows(g.json["input_ids"]);
  g.mask = int_rows(g.json["attention_mask"]);
  return g;
}

torch::Tensor floats(const nlohmann::json& value) {
  return torch::tensor(value.get<std::vector<double>>(), torch::kFloat);
}

/// The last hidden state in eval mode -> (B, T, C)
torch::Tensor encoded(HfModernBert& model, const Golden& g) {
  model->eval();
  torch::NoGradGuard no_grad;
  return model->encode(g.ids, g.mask);
}

/// The hidden states of the real tokens within 1e-5 of transformers', and logits and loss within
/// 1e-6, with the padding skipped and computed. (Where a local layer's window holds only padding,
/// transformers' padded queries attend to every key, bigbatch's to themselves: the padding's own
/// rows differ, which nothing reads.)
void expect_transformers_outputs(HfModernBert& model, const Golden& g, const std::string& pooling) {
  const nlohmann::json& expected = g.json[pooling];
  const torch::Tensor hidden =
      floats(expected["last_hidden_state"])
          .view(expected["hidden_shape"].get<std::vector<int64_t>>());  // (B, T, C)
  const torch::Tensor real = g.mask.ne(0).unsqueeze(-1);
  EXPECT_LE(((encoded(model, g) - hidden) * real).abs().max().item<double>(), 1e-5);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected_logits = floats(expected["logits"]).view({g.ids.size(0), -1});
  for (const bool skip : {true, false}) {
    model->set_skip_padding(skip);
    const torch::Tensor logits = model->forward(g.ids, g.mask);  // (B, labels)
    EXPECT_LE((logits - expected_logits).abs().max().item<double>(), 1e-6) << pooling << skip;
    const torch::Tensor loss = torch::cross_entropy_loss(
        logits, torch::tensor(g.json["labels"].get<std::vector<int64_t>>()));
    EXPECT_NEAR(loss.item<double>(), expected["loss"].get<double>(), 1e-6) << pooling << skip;
  }
  model->set_skip_padding(true);
}

/// A copy of tiny-modernbert in `dir` with its config.json edited by `edit`; returns its path.
std::string edited_copy(testing::TempDir& dir, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path copy = dir.path() / "model";
  fs::copy(hf_dir("tiny-modernbert"), copy);
  nlohmann::json config = nlohmann::json::parse(testing::read_file(copy / "config.json"));
  edit(config);
  std::ofstream(copy / "config.json") << config.dump(1);
  return copy.string();
}

TEST(HfModernBert, HiddenStatesLogitsAndLossAreThoseOfTransformers) {
  LoadedHfModernBert loaded = load_hf_modernbert(hf_dir("tiny-modernbert"));
  EXPECT_TRUE(loaded.fresh.empty());
  EXPECT_TRUE(loaded.unused.empty());
  HfModernBert model = loaded.model;
  const HfModernBertConfig& c = model->config();
  EXPECT_EQ(c.sliding_layers(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(c.attention_window(0), 0);
  EXPECT_EQ(c.attention_window(1), 3);  // keys at most local_attention / 2 = 2 away
  EXPECT_EQ(c.global_rope_theta(), 160000.0);
  EXPECT_EQ(c.local_rope_theta(), 10000.0);
  EXPECT_EQ(c.classifier_pooling(), ModernBertPooling::kCls);
  EXPECT_FALSE(model->layers->ptr(0)->as<HfModernBertLayer>()->attn_norm);
  EXPECT_FALSE(model->head_dense->bias.defined());
  EXPECT_FALSE(model->final_norm->bias.defined());
  expect_transformers_outputs(model, golden(), "cls");
}

TEST(HfModernBert, MeanPoolingIsTransformers) {
  testing::TempDir dir;
  const std::string path =
      edited_copy(dir, [](nlohmann::json& config) { config["classifier_pooling"] = "mean"; });
  HfModernBert model = load_hf_modernbert(path).model;
  EXPECT_EQ(model->config().classifier_pooling(), ModernBertPooling::kMean);
  expect_transformers_outputs(model, golden(), "mean");
}

TEST(HfModernBert, TheMaskedLmCheckpointLoadsWithoutItsDecoderAndWithAFreshClassifier) {
  const Golden g = golden();
  LoadedHfModernBert mlm = load_hf_modernbert(hf_dir("tiny-modernbert-mlm"), 3);
  EXPECT_EQ(mlm.fresh, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(mlm.unused, std::vector<std::string>{"decoder.bias"});
  HfModernBert classifier = load_hf_modernbert(hf_dir("tiny-modernbert")).model;
  EXPECT_TRUE(torch::equal(encoded(mlm.model, g), encoded(classifier, g)));
  EXPECT_TRUE(torch::equal(mlm.model->head_dense->weight, classifier->head_dense->weight));
  const HfModel model = load_hf_model(hf_dir("tiny-modernbert-mlm"), 2);
  EXPECT_EQ(model.trained_heads(), std::vector<std::string>{"classifier"});
  EXPECT_EQ(model.describe(),
            "modernbert: 3 layers (2 local over a window of 4 tokens), width 32, 4 heads, "
            "vocabulary 427, 2 classes, cls pooling");
  EXPECT_EQ(model.lookup_parameters(), 427 * 32);
  EXPECT_EQ(model.max_positions(), 64);
  EXPECT_EQ(read_hf_max_positions(hf_dir("tiny-modernbert-mlm")), 64);
  EXPECT_EQ(model.dropouts(), "");
}

TEST(HfModernBert, TheBareEncoderLoadsWithAFreshHeadAndClassifier) {
  const Golden g = golden();
  LoadedHfModernBert encoder = load_hf_modernbert(hf_dir("tiny-modernbert-encoder"), 2);
  EXPECT_EQ(encoder.fresh, (std::vector<std::string>{"head.dense.weight", "head.norm.weight",
                                                     "classifier.weight", "classifier.bias"}));
  EXPECT_TRUE(encoder.unused.empty());
  HfModernBert classifier = load_hf_modernbert(hf_dir("tiny-modernbert")).model;
  EXPECT_TRUE(torch::equal(encoded(encoder.model, g), encoded(classifier, g)));
  // transformers' initialisation: truncated at 2 standard deviations, zero biases, unit norms.
  const double dense_std = 0.02 / std::sqrt(2.0 * 3);
  EXPECT_LE(encoder.model->head_dense->weight.abs().max().item<double>(), 2 * dense_std);
  EXPECT_NEAR(encoder.model->head_dense->weight.std().item<double>(), dense_std, 0.2 * dense_std);
  EXPECT_LE(encoder.model->classifier->weight.abs().max().item<double>(), 2 / std::sqrt(32.0));
  EXPECT_EQ(encoder.model->classifier->bias.abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(encoder.model->head_norm->weight, torch::ones({32})));
  const HfModel model = load_hf_model(hf_dir("tiny-modernbert-encoder"), 2);
  EXPECT_EQ(model.trained_heads(),
            (std::vector<std::string>{"head.dense", "head.norm", "classifier"}));
}

/// A small ModernBERT without dropout: vocabulary 99, width 32, 4 layers of 4 heads (global,
/// local, local, global), windows of keys at most 2 away, 3 labels.
HfModernBertConfig small_config(ModernBertPooling pooling) {
  return HfModernBertConfig()
      .vocab_size(99)
      .hidden_size(32)
      .intermediate_size(40)
      .num_hidden_layers(4)
      .num_attention_heads(4)
      .max_position_embeddings(16)
      .local_attention(4)
      .sliding_layers({false, true, true, false})
      .classifier_pooling(pooling)
      .num_labels(3);
}

TEST(HfModernBert, SkippingThePaddingGivesTheLogitsAndGradientsOfThePaddedEncoder) {
  for (const ModernBertPooling pooling : {ModernBertPooling::kCls, ModernBertPooling::kMean}) {
    SCOPED_TRACE(pooling == ModernBertPooling::kCls ? "cls" : "mean");
    torch::manual_seed(8);
    HfModernBert model(small_config(pooling));
    const torch::Tensor lengths = torch::tensor({12, 5, 2, 9}, torch::kLong);
    const torch::Tensor mask = torch::arange(12).unsqueeze(0).lt(lengths.unsqueeze(1));  // (4, 12)
    const torch::Tensor ids = torch::randint(1, 99, {4, 12}, torch::kLong).mul(mask);    // pad 0
    testing::expect_skipped_padding_exact(model, ids, mask);
  }
}

TEST(HfModernBert, LeftPaddingRunsPaddedAtTheCountedPositions) {
  // transformers counts the padding before a left-padded row's tokens in their positions; packed
  // rows would start them at 0 (the same scores up to rounding, RoPE's being relative), so a
  // left-padded batch runs padded: bitwise the logits of skip_padding off.
  torch::manual_seed(9);
  HfModernBert model(small_config(ModernBertPooling::kMean));
  model->eval();
  const torch::Tensor mask = torch::arange(10).unsqueeze(0).ge(torch::tensor({{0}, {4}}));
  const torch::Tensor ids = torch::randint(1, 99, {2, 10}, torch::kLong).mul(mask);  // (2, 10)
  torch::NoGradGuard no_grad;
  const torch::Tensor skipped = model->forward(ids, mask);
  model->set_skip_padding(false);
  EXPECT_TRUE(torch::equal(skipped, model->forward(ids, mask)));
}

TEST(HfModernBertConfig, TheHubsOlderFormReadsAsTransformers5s) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-modernbert") + "/config.json"));
  io::HfConfig current(config, "config.json");
  const HfModernBertConfig expected = read_hf_modernbert_config(current);
  // As ModernBERT-base's config.json and sentence-transformers' have it: no layer_types nor
  // rope_parameters, the bases by name, and fields transformers does not read.
  config.erase("layer_types");
  config.erase("rope_parameters");
  config["global_attn_every_n_layers"] = 3;
  config["global_rope_theta"] = 160000.0;
  config["local_rope_theta"] = 10000.0;
  config["layer_norm_eps"] = 1e-5;
  config["position_embedding_type"] = "absolute";
  config["reference_compile"] = true;
  io::HfConfig older(config, "config.json");
  const HfModernBertConfig read = read_hf_modernbert_config(older);
  EXPECT_EQ(read.sliding_layers(), expected.sliding_layers());
  EXPECT_EQ(read.global_rope_theta(), expected.global_rope_theta());
  EXPECT_EQ(read.local_rope_theta(), expected.local_rope_theta());
  EXPECT_EQ(read.num_labels(), 3);
  // Another pattern and other bases are read, not assumed.
  config["global_attn_every_n_layers"] = 2;
  config["global_rope_theta"] = 80000.0;
  io::HfConfig granite(config, "config.json");
  const HfModernBertConfig other = read_hf_modernbert_config(granite);
  EXPECT_EQ(other.sliding_layers(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(other.global_rope_theta(), 80000.0);
}

TEST(HfModernBertConfig, WhatItDoesNotImplementIsRefusedByName) {
  const nlohmann::json base =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-modernbert") + "/config.json"));
  const auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = base;
    edit(config);
    io::HfConfig reader(config, "config.json");
    return testing::input_error_of([&] { read_hf_modernbert_config(reader); });
  };
  testing::expect_contains(error_of([](nlohmann::json& c) { c["hidden_activation"] = "silu"; }),
                           {"config.json", "hidden_activation", "silu", "gelu"});
  testing::expect_contains(
      error_of(
          [](nlohmann::json& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }),
      {"config.json: rope_parameters.full_attention.rope_type = \"yarn\" is not supported"});
  testing::expect_contains(error_of([](nlohmann::json& c) { c["classifier_pooling"] = "max"; }),
                           {"classifier_pooling = \"max\"", "\"cls\" or \"mean\""});
  testing::expect_contains(
      error_of([](nlohmann::json& c) { c["layer_types"] = {"full_attention"}; }),
      {"config.json: layer_types must list num_hidden_layers = 3 layer types"});
  testing::expect_contains(
      error_of([](nlohmann::json& c) { c["layer_types"][1] = "chunked_attention"; }),
      {"config.json: unsupported layer_types[1] \"chunked_attention\""});
  testing::expect_contains(error_of([](nlohmann::json& c) { c["num_attention_heads"] = 3; }),
                           {"hidden_size = 32 is not divisible by num_attention_heads = 3"});
  testing::expect_contains(error_of([](nlohmann::json& c) { c["problem_type"] = "regression"; }),
                           {"problem_type"});
  testing::expect_contains(error_of([](nlohmann::json& c) { c["qk_norm"] = true; }),
                           {"unsupported", "\"qk_norm\"", "ModernBERT"});
}

}  // namespace
}  // namespace bigbatch::models
