// models::HfBert as RoBERTa against Hugging Face transformers: the tiny random RoBERTa classifier
// of tests/hf/make_tiny_bert.py (positions counted from the pad id + 1, the padded row holding
// the pad id), roberta-base's tensors (masked-LM head and pooler, skipped and reported), a new
// head for other classes, XLM-RoBERTa's model_type, the padding skipped against computed, and
// RoBERTa's length limit. Also BERT's pre-training checkpoints: heads skipped, legacy
// LayerNorm.gamma/beta names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "bigbatch/io/hf_weights.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/models/hf_bert.h"
#include "bigbatch/models/hf_model.h"
#include "models/hf_encoder_checks.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;

using testing::hf_dir;

using testing::encoded;
using testing::encoder_golden;

/// A copy of the model directory `name` in `dir`/`copy` with its config.json edited.
std::string edited_copy(const testing::TempDir& dir, const std::string& name,
                        const std::string& copy, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path target = dir.path() / copy;
  fs::copy(hf_dir(name), target, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(testing::read_file(target / "config.json"));
  edit(config);
  std::ofstream(target / "config.json") << config.dump(2);
  return target.string();
}

TEST(HfRoberta, HiddenStatesLogitsAndLossAreThoseOfTransformers) {
  LoadedHfBert loaded = load_hf_bert(hf_dir("tiny-roberta"));
  EXPECT_TRUE(loaded.fresh.empty());
  EXPECT_TRUE(loaded.unused.empty());
  HfBert model = loaded.model;
  ASSERT_TRUE(model->config().is_roberta());
  EXPECT_EQ(model->config().pad_token_id(), 1);
  testing::expect_transformers_outputs(model, encoder_golden("tiny-roberta-golden.json"));
}

TEST(HfRoberta, RobertaBasesTensorsLoadWithoutTheirMaskedLmHeadAndPooler) {
  const testing::EncoderGolden g = encoder_golden("tiny-roberta-golden.json");
  LoadedHfBert mlm = load_hf_bert(hf_dir("tiny-roberta-mlm"), 3);
  EXPECT_EQ(mlm.fresh,
            (std::vector<std::string>{"classifier.dense.weight", "classifier.dense.bias",
                                      "classifier.out_proj.weight", "classifier.out_proj.bias"}));
  EXPECT_EQ(mlm.unused,
            (std::vector<std::string>{"lm_head.bias", "lm_head.dense.bias", "lm_head.dense.weight",
                                      "lm_head.layer_norm.bias", "lm_head.layer_norm.weight",
                                      "roberta.pooler.dense.bias", "roberta.pooler.dense.weight"}));
  HfBert classifier = load_hf_bert(hf_dir("tiny-roberta")).model;
  EXPECT_TRUE(torch::equal(encoded(mlm.model, g), encoded(classifier, g)));
  const HfModel model = load_hf_model(hf_dir("tiny-roberta-mlm"), 3);
  EXPECT_EQ(model.trained_heads(), std::vector<std::string>{"classifier"});
  EXPECT_EQ(model.unused.size(), 7u);
}

TEST(HfRoberta, AClassifierForOtherClassesGetsANewOutputAndKeepsItsDense) {
  LoadedHfBert same = load_hf_bert(hf_dir("tiny-roberta"), 3);
  LoadedHfBert other = load_hf_bert(hf_dir("tiny-roberta"), 5);
  EXPECT_EQ(other.fresh,
            (std::vector<std::string>{"classifier.out_proj.weight", "classifier.out_proj.bias"}));
  EXPECT_EQ(other.model->head_output->weight.sizes(), (std::vector<int64_t>{5, 32}));
  EXPECT_TRUE(torch::equal(other.model->head_dense->weight, same.model->head_dense->weight));
  // PEFT trains and saves the whole head.
  EXPECT_EQ(load_hf_model(hf_dir("tiny-roberta"), 5).trained_heads(),
            std::vector<std::string>{"classifier"});
}

TEST(HfRoberta, XlmRobertaIsTheSameModel) {
  testing::TempDir dir;
  const std::string xlm = edited_copy(dir, "tiny-roberta", "xlm",
                                      [](nlohmann::json& c) { c["model_type"] = "xlm-roberta"; });
  const testing::EncoderGolden g = encoder_golden("tiny-roberta-golden.json");
  const HfModel model = load_hf_model(xlm);
  EXPECT_EQ(model.task, HfTask::kClassification);
  EXPECT_EQ(model.describe(),
            "xlm-roberta: 2 layers, width 32, 4 heads, vocabulary 425, 3 classes");
  HfBert roberta = load_hf_bert(hf_dir("tiny-roberta")).model;
  HfBert same = model.bert;
  EXPECT_TRUE(torch::equal(encoded(same, g), encoded(roberta, g)));
}

TEST(HfRoberta, InputsAreLimitedToThePositionsAfterThePadId) {
  EXPECT_EQ(read_hf_max_positions(hf_dir("tiny-roberta")), 32);  // 34 - 1 - 1
  EXPECT_EQ(load_hf_model(hf_dir("tiny-roberta")).max_positions(), 32);
  HfBert model = load_hf_bert(hf_dir("tiny-roberta")).model;
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->forward(torch::full({1, 32}, 5, torch::kLong)).sizes(),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(testing::input_error_of([&] {
              model->forward(torch::full({1, 33}, 5, torch::kLong));
            }),
            "RoBERTa input length T = 33 is outside [1, max_position_embeddings - pad_token_id "
            "- 1 = 32]");
}

TEST(HfRoberta, SkippingThePaddingGivesTheLogitsAndGradientsOfThePaddedEncoder) {
  torch::manual_seed(6);
  HfBert model(testing::small_encoder_config("roberta").pad_token_id(1).type_vocab_size(1));
  const torch::Tensor lengths = torch::tensor({12, 5, 2, 9}, torch::kLong);
  const torch::Tensor mask = torch::arange(12).unsqueeze(0).lt(lengths.unsqueeze(1));  // (4, 12)
  const torch::Tensor ids =
      torch::where(mask, torch::randint(2, 99, {4, 12}, torch::kLong), 1);  // pad id 1
  testing::expect_skipped_padding_exact(model, ids, mask);
  // The position embeddings used are those of 2.. (the pad id + 1 on): row 0's gradient is zero.
  const torch::Tensor position_grad = model->position_embeddings->weight.grad();  // (16, C)
  EXPECT_EQ(position_grad[0].abs().max().item<double>(), 0.0);
  EXPECT_GT(position_grad[2].abs().max().item<double>(), 0.0);
}

TEST(HfRobertaConfig, ThePadIdIsRequiredAndChecked) {
  const auto error = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config =
        nlohmann::json::parse(testing::read_file(hf_dir("tiny-roberta") + "/config.json"));
    edit(config);
    io::HfConfig reader(config, "config.json");
    return testing::input_error_of([&] { read_hf_bert_config(reader); });
  };
  EXPECT_EQ(error([](nlohmann::json& c) { c.erase("pad_token_id"); }),
            "config.json: missing field \"pad_token_id\" (an integer)");
  EXPECT_EQ(error([](nlohmann::json& c) { c["pad_token_id"] = 33; }),
            "config.json: pad_token_id = 33 must be a token id (vocab_size 425) below "
            "max_position_embeddings - 1 = 33: RoBERTa's positions start after it");
  EXPECT_NE(error([](nlohmann::json& c) { c["rotary"] = true; })
                .find("unsupported field(s) for RoBERTa (RobertaForSequenceClassification): "
                      "\"rotary\" = true"),
            std::string::npos);
}

/// The tensors of `directory`/model.safetensors with every name passed through `rename`, written
/// with its config and tokenizer to `target`.
void write_renamed(const std::string& directory, const fs::path& target,
                   const std::function<std::string(const std::string&)>& rename) {
  fs::copy(directory, target, fs::copy_options::recursive);
  std::vector<io::NamedTensor> tensors;
  for (const auto& [name, tensor] : io::read_hf_weights(directory).tensors)
    tensors.emplace_back(rename(name), tensor);
  io::write_safetensors((target / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

TEST(HfBertCheckpoints, BertForPreTrainingLoadsWithoutItsHeads) {
  const testing::EncoderGolden g = encoder_golden("tiny-bert-golden.json");
  LoadedHfBert pretraining = load_hf_bert(hf_dir("tiny-bert-pretraining"), 3);
  EXPECT_EQ(pretraining.fresh, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(pretraining.unused,
            (std::vector<std::string>{
                "cls.predictions.bias", "cls.predictions.transform.LayerNorm.bias",
                "cls.predictions.transform.LayerNorm.weight",
                "cls.predictions.transform.dense.bias", "cls.predictions.transform.dense.weight",
                "cls.seq_relationship.bias", "cls.seq_relationship.weight"}));
  HfBert classifier = load_hf_bert(hf_dir("tiny-bert")).model;
  EXPECT_TRUE(torch::equal(encoded(pretraining.model, g), encoded(classifier, g)));
  EXPECT_TRUE(torch::equal(pretraining.model->head_dense->weight, classifier->head_dense->weight));
}

TEST(HfBertCheckpoints, LegacyLayerNormGammaAndBetaLoadAsWeightAndBias) {
  testing::TempDir dir;
  const fs::path legacy = dir.path() / "legacy";
  write_renamed(hf_dir("tiny-bert"), legacy, [](std::string name) {
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{"LayerNorm.weight", "LayerNorm.gamma"},
          {"LayerNorm.bias", "LayerNorm.beta"}}) {
      if (name.size() > from.size() &&
          name.compare(name.size() - from.size(), from.size(), from) == 0)
        name = name.substr(0, name.size() - from.size()) + to;
    }
    return name;
  });
  ASSERT_EQ(io::read_hf_weights(legacy.string()).tensors.count("bert.embeddings.LayerNorm.gamma"),
            1u);
  const testing::EncoderGolden g = encoder_golden("tiny-bert-golden.json");
  LoadedHfBert renamed = load_hf_bert(legacy.string());
  EXPECT_TRUE(renamed.fresh.empty());
  HfBert classifier = load_hf_bert(hf_dir("tiny-bert")).model;
  EXPECT_TRUE(torch::equal(encoded(renamed.model, g), encoded(classifier, g)));
}

TEST(HfBertCheckpoints, AnUnknownTensorIsStillRefused) {
  testing::TempDir dir;
  const fs::path odd = dir.path() / "odd";
  write_renamed(hf_dir("tiny-bert"), odd, [](const std::string& name) {
    return name == "classifier.bias" ? std::string("score.bias") : name;
  });
  testing::expect_contains(testing::input_error_of([&] { load_hf_bert(odd.string()); }),
                           {"the model has no place for the checkpoint's \"score.bias\""});
}

}  // namespace
}  // namespace bigbatch::models
