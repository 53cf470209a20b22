// models::load_hf_model_with_peft_adapter against Python's PEFT: adapters that PEFT saved on the
// tiny Llama (rsLoRA, a list of targets), GPT-2 (Conv1D, a regular expression of targets) and
// BERT (a classifier saved whole) give PeftModel's logits, before and after merging; the base is
// found or named; every unsupported setting and broken file is named.
#include "bigbatch/models/peft_adapter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/nn/lora_merge.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;

using testing::hf_dir;

class PeftAdapter : public ::testing::TestWithParam<std::string> {};

TEST_P(PeftAdapter, GivesTheLogitsOfPeftModelBeforeAndAfterMerging) {
  const std::string adapter = "peft-" + GetParam();
  const nlohmann::json golden =
      nlohmann::json::parse(testing::read_file(hf_dir("peft-golden.json")))[adapter];
  const HfModel model = load_hf_model_with_peft_adapter(hf_dir(adapter), hf_dir(GetParam()));
  model.module()->eval();
  const torch::Tensor ids =
      torch::tensor(golden["input_ids"][0].get<std::vector<int64_t>>(), torch::kLong)
          .unsqueeze(0);  // (1, T)
  const torch::Tensor expected =
      torch::tensor(golden["logits"].get<std::vector<double>>(), torch::kFloat)
          .view(golden["logits_shape"].get<std::vector<int64_t>>());
  torch::NoGradGuard no_grad;
  const HfModel base = load_hf_model(hf_dir(GetParam()));
  base.module()->eval();
  EXPECT_GT((base.forward(ids) - expected).abs().max().item<double>(), 1e-2);  // they matter
  EXPECT_LE((model.forward(ids) - expected).abs().max().item<double>(), 1e-5);
  EXPECT_FALSE(nn::merge_lora(*model.module()).empty());
  EXPECT_LE((model.forward(ids) - expected).abs().max().item<double>(), 1e-5);
  for (const torch::Tensor& p : model.module()->parameters())
    EXPECT_FALSE(p.requires_grad());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PeftAdapter, ::testing::Values("tiny-llama", "tiny-gpt2"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           name.erase(name.find('-'), 1);
                           return name;
                         });

TEST(PeftAdapterDirectory, AClassifiersSavedHeadBringsItsClassesAndPeftModelsLogits) {
  const nlohmann::json golden =
      nlohmann::json::parse(testing::read_file(hf_dir("peft-golden.json")))["peft-tiny-bert"];
  const HfModel model =
      load_hf_model_with_peft_adapter(hf_dir("peft-tiny-bert"), hf_dir("tiny-bert"));
  model.module()->eval();
  EXPECT_EQ(model.outputs(), 3);  // the saved classifier's rows, not the base config's labels
  const torch::Tensor ids =
      torch::tensor(golden["input_ids"][0].get<std::vector<int64_t>>(), torch::kLong)
          .unsqueeze(0);  // (1, T)
  const torch::Tensor expected =
      torch::tensor(golden["logits"].get<std::vector<double>>(), torch::kFloat)
          .view(golden["logits_shape"].get<std::vector<int64_t>>());  // (1, 3)
  torch::NoGradGuard no_grad;
  EXPECT_LE((model.forward(ids) - expected).abs().max().item<double>(), 1e-5);
  nn::merge_lora(*model.module());
  EXPECT_LE((model.forward(ids) - expected).abs().max().item<double>(), 1e-5);
}

TEST(PeftAdapterDirectory, IsToldFromAModelDirectoryAndItsBaseIsFoundOrNamed) {
  EXPECT_TRUE(is_peft_adapter(hf_dir("peft-tiny-llama")));
  EXPECT_FALSE(is_peft_adapter(hf_dir("tiny-llama")));
  EXPECT_EQ(peft_base_model(hf_dir("peft-tiny-llama"), "/some/base"), "/some/base");
  // base_model_name_or_path is "tiny-llama", relative to tests/hf: not from here.
  const std::string message =
      testing::input_error_of([] { peft_base_model(hf_dir("peft-tiny-llama")); });
  EXPECT_NE(message.find("base_model_name_or_path \"tiny-llama\" is not a directory here; give "
                         "the base model directory with --base"),
            std::string::npos)
      << message;
}

/// A copy of peft-tiny-llama in a temporary directory, to break.
class BrokenPeftAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(hf_dir("peft-tiny-llama"), dir_.path() / "adapter", fs::copy_options::recursive);
    config_ = nlohmann::json::parse(testing::read_file(adapter() + "/adapter_config.json"));
  }
  std::string adapter() const { return (dir_.path() / "adapter").string(); }
  /// The InputError of loading the adapter with `key` set to `value` in its config.
  std::string error_with(const std::string& key, const nlohmann::json& value) {
    nlohmann::json changed = config_;
    changed[key] = value;
    std::ofstream(adapter() + "/adapter_config.json") << changed.dump();
    return testing::input_error_of(
        [&] { load_hf_model_with_peft_adapter(adapter(), hf_dir("tiny-llama")); });
  }

  testing::TempDir dir_;
  nlohmann::json config_;
};

TEST_F(BrokenPeftAdapter, UnsupportedSettingsAreNamed) {
  EXPECT_NE(error_with("use_dora", true).find("use_dora = true is not supported"),
            std::string::npos);
  EXPECT_NE(error_with("peft_type", "IA3").find("peft_type \"IA3\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_with("bias", "all").find("bias = \"all\" is not supported"), std::string::npos);
  EXPECT_NE(error_with("rank_pattern", {{"q_proj", 8}}).find("rank_pattern"), std::string::npos);
  EXPECT_NE(error_with("r", 0).find("r must be a positive integer"), std::string::npos);
  EXPECT_NE(error_with("target_modules", "nothing\\.here").find("matches no linear layer"),
            std::string::npos);
  EXPECT_NE(error_with("target_modules", "(").find("is not a regular expression"),
            std::string::npos);
  EXPECT_NE(error_with("target_modules", {"k_norm"})
                .find("adapter_config.json: target_modules do not fit the base model " +
                      hf_dir("tiny-llama") + ": \"k_norm\" names no module of the model"),
            std::string::npos);
}

TEST_F(BrokenPeftAdapter, AMissingMisShapedOrUnplacedTensorIsNamed) {
  io::Safetensors weights = io::read_safetensors(adapter() + "/adapter_model.safetensors");
  const std::string name = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight";
  const auto write = [&](const std::vector<io::NamedTensor>& tensors) {
    io::write_safetensors(adapter() + "/adapter_model.safetensors", tensors);
    return testing::input_error_of(
        [&] { load_hf_model_with_peft_adapter(adapter(), hf_dir("tiny-llama")); });
  };
  std::vector<io::NamedTensor> missing, misshaped, unplaced = weights.tensors;
  for (const auto& [key, tensor] : weights.tensors) {
    if (key != name)
      missing.emplace_back(key, tensor);
    misshaped.emplace_back(key, key == name ? tensor.narrow(1, 0, 2) : tensor);
  }
  unplaced.emplace_back("base_model.model.model.extra.weight", torch::ones({2}));
  std::string message = write(missing);
  EXPECT_NE(message.find("lacks \"" + name + "\""), std::string::npos) << message;
  message = write(misshaped);
  EXPECT_NE(message.find("\"" + name + "\" has shape [32, 2] but the model's has shape [32, 4]"),
            std::string::npos)
      << message;
  message = write(unplaced);
  EXPECT_NE(message.find("the model has no place for \"base_model.model.model.extra.weight\""),
            std::string::npos)
      << message;
  fs::remove(adapter() + "/adapter_model.safetensors");
  message = testing::input_error_of(
      [&] { load_hf_model_with_peft_adapter(adapter(), hf_dir("tiny-llama")); });
  EXPECT_NE(message.find("holds no adapter_model.safetensors"), std::string::npos) << message;
}

}  // namespace
}  // namespace bigbatch::models
