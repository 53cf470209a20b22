// save_hf_model: each tiny Hugging Face model, without adapters, with LoRA adapters (B drawn away
// from zero so that they matter) and with frozen weights stored in bfloat16, is exported, loaded
// back (load_hf_model, or the source plus the PEFT adapter) and gives bigbatch's logits within
// 1e-6 (relative where they exceed 1); tests/models/check_hf_export.py loads the same exports with
// transformers and peft and compares with the logits this test writes (skipped, saying what is
// missing, where the build's Python lacks transformers or peft). Every refusal is named.
#include "bigbatch/models/hf_export.h"
#include "bigbatch/models/peft_adapter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/nn/lora.h"
#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kPython = BIGBATCH_TEST_PYTHON;

/// A fixture and how the tests adapt it.
struct Fixture {
  std::string name;  ///< directory under tests/hf
  int64_t num_labels = 0;
  std::vector<std::string> targets;    ///< LoraOptions.targets
  std::vector<std::string> trainable;  ///< LoraOptions.trainable
};

std::string fixture_dir(const std::string& name) {
  return std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/" + name;
}

nn::LoraOptions lora_of(const Fixture& fixture) {
  return nn::LoraOptions().rank(4).alpha(8).targets(fixture.targets).trainable(fixture.trainable);
}

/// Draws every lora_B (and each trainable module's weights) away from where they start, so that
/// the export must carry them.
void perturb(torch::nn::Module& module, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    if (item.key().find("lora_B") != std::string::npos)
      item.value().normal_(0.0, 0.05);
    else if (item.value().requires_grad() && item.key().find("lora_A") == std::string::npos)
      item.value().add_(torch::randn_like(item.value()) * 0.05);
  }
}

/// Two rows of 8 tokens, the second right-padded after 5.
struct Inputs {
  torch::Tensor ids;   ///< (2, 8) int64
  torch::Tensor mask;  ///< (2, 8) int64, 1 at real tokens
};

Inputs inputs() {
  torch::manual_seed(17);
  Inputs in;
  in.ids = torch::randint(1, 90, {2, 8}, torch::kLong);
  in.mask = torch::ones({2, 8}, torch::kLong);
  in.mask.index_put_({1, torch::indexing::Slice(5)}, 0);
  return in;
}

torch::Tensor logits_of(const HfModel& model, const Inputs& in) {
  model.module()->eval();
  torch::NoGradGuard no_grad;
  return model.forward(in.ids, in.mask);  // (B, T, vocab) or (B, classes)
}

/// max |a - b| over the real tokens (all rows of a classifier's logits).
double max_difference(const torch::Tensor& a, const torch::Tensor& b, const Inputs& in) {
  if (a.dim() == 2)
    return (a - b).abs().max().item<double>();
  const torch::Tensor real = in.mask.to(torch::kBool);  // (B, T)
  return (a.index({real}) - b.index({real})).abs().max().item<double>();
}

/// The round trip's tolerance for `logits`: 1e-6, or a few float32 roundings of the largest where
/// that is above 1 (tiny-modernbert's reach 3.3).
double round_trip_tolerance(const torch::Tensor& logits) {
  return 1e-6 * std::max(1.0, logits.abs().max().item<double>());
}

std::vector<int64_t> flat(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.contiguous().to(torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

/// Sets the tensors of the PEFT adapter file in `directory` into `model` (adapted as the exported
/// one was): what PeftModel.from_pretrained does.
void load_peft(const HfModel& model, const fs::path& directory) {
  const io::Safetensors file =
      io::read_safetensors((directory / "adapter_model.safetensors").string());
  auto parameters = model.module()->named_parameters();
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : file.tensors) {
    ASSERT_TRUE(starts_with(name, "base_model.model.")) << name;
    const std::string own = name.substr(std::string("base_model.model.").size());
    torch::Tensor* parameter = parameters.find(own);
    ASSERT_NE(parameter, nullptr) << own;
    ASSERT_EQ(parameter->sizes(), tensor.sizes()) << own;
    parameter->copy_(tensor);
  }
}

class HfExportRoundTrip : public ::testing::TestWithParam<Fixture> {
 protected:
  /// The fixture's model, adapted (and its frozen weights stored in bfloat16) as asked.
  HfModel load(bool adapters, bool bf16 = false) const {
    HfModel model = load_hf_model(fixture_dir(GetParam().name), GetParam().num_labels);
    if (adapters) {
      nn::apply_lora(*model.module(), lora_of(GetParam()));
      perturb(*model.module(), 5);
    }
    if (bf16)
      nn::store_frozen_weights(*model.module(), torch::kBFloat16);
    return model;
  }

  HfExportOptions options(const std::string& out, HfExportMode mode) const {
    return HfExportOptions()
        .source_directory(fixture_dir(GetParam().name))
        .output_directory((dir_.path() / out).string())
        .mode(mode)
        .modules_to_save(GetParam().trainable);
  }

  /// Runs check_hf_export.py on the export in `out` against `logits`; skips, naming what is
  /// missing, when the Python cannot.
  void check_in_python(const HfModel& model, const std::string& out, HfExportMode mode,
                       const torch::Tensor& logits, const Inputs& in) const {
    if (::access(kPython, X_OK) != 0)
      GTEST_SKIP() << kPython << " is missing (run scripts/setup, or set -DBIGBATCH_PYTHON)";
    json expected;
    expected["mode"] = mode == HfExportMode::kPeft ? "peft" : "merged";
    expected["directory"] = (dir_.path() / out).string();
    expected["base"] = fixture_dir(GetParam().name);
    expected["task"] = model.task == HfTask::kClassification ? "classification" : "causal_lm";
    expected["num_labels"] = model.outputs();
    expected["input_ids"] = json::array();
    expected["attention_mask"] = json::array();
    for (int64_t row = 0; row < in.ids.size(0); ++row) {
      expected["input_ids"].push_back(flat(in.ids[row]));
      expected["attention_mask"].push_back(flat(in.mask[row]));
    }
    const torch::Tensor values = logits.contiguous().to(torch::kDouble);
    expected["logits"] =
        std::vector<double>(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
    expected["logits_shape"] = logits.sizes().vec();
    expected["tolerance"] = 2e-5;  // transformers and bigbatch agree within 1e-5 on these models
    const std::string path = dir_.write(out + "-expected.json", expected.dump()).string();
    const Result result =
        run_shell(cat(kPython, " ", BIGBATCH_TEST_DATA_DIR, "/models/check_hf_export.py ", path));
    if (result.exit_code == 77)
      GTEST_SKIP() << kPython << ": " << result.output;
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("max_abs_diff"), std::string::npos) << result.output;
    std::cout << GetParam().name << " " << out << ": "
              << result.output.substr(result.output.rfind('\n', result.output.size() - 2) + 1);
  }

  /// Exports `model` merged, reloads it in C++ and checks it in Python.
  void check_merged(const HfModel& model, const std::string& out) const {
    const Inputs in = inputs();
    const torch::Tensor logits = logits_of(model, in);
    const auto files = save_hf_model(model, options(out, HfExportMode::kMerged));
    EXPECT_EQ(files[0], "config.json");
    EXPECT_EQ(files[1], "model.safetensors");
    const io::Safetensors saved =
        io::read_safetensors((dir_.path() / out / "model.safetensors").string());
    for (const auto& [name, tensor] : saved.tensors) {
      EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
      EXPECT_EQ(tensor.scalar_type(), torch::kFloat) << name;
    }
    const HfModel reloaded = load_hf_model((dir_.path() / out).string(), model.outputs());
    EXPECT_LE(max_difference(logits_of(reloaded, in), logits, in), round_trip_tolerance(logits));
    check_in_python(model, out, HfExportMode::kMerged, logits, in);
  }

  testing::TempDir dir_;
};

TEST_P(HfExportRoundTrip, MergedWithoutAdapters) {
  check_merged(load(false), "plain");
}

TEST_P(HfExportRoundTrip, MergedWithAdapters) {
  const HfModel model = load(true);
  // The adapters must change the logits for the test to mean anything: by 100 times the round
  // trip's tolerance (1e-6), so that an export that lost them fails. The tiny classifiers' heads
  // keep logits under 0.1.
  const HfModel source = load_hf_model(fixture_dir(GetParam().name), GetParam().num_labels);
  if (GetParam().trainable.empty()) {
    EXPECT_GT(max_difference(logits_of(model, inputs()), logits_of(source, inputs()), inputs()),
              1e-4);
  }
  check_merged(model, "merged");
}

TEST_P(HfExportRoundTrip, MergedWithFrozenWeightsInBf16) {
  check_merged(load(true, /*bf16=*/true), "merged-bf16");
}

TEST_P(HfExportRoundTrip, PeftAdapter) {
  const HfModel model = load(true, /*bf16=*/true);
  const Inputs in = inputs();
  const torch::Tensor logits = logits_of(model, in);
  const auto files = save_hf_model(model, options("peft", HfExportMode::kPeft));
  EXPECT_EQ(files, (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}));
  const json config = json::parse(testing::read_file(dir_.path() / "peft" / "adapter_config.json"));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8);
  EXPECT_EQ(config["fan_in_fan_out"], GetParam().name == "tiny-gpt2");
  EXPECT_EQ(config["task_type"], model.task == HfTask::kClassification ? "SEQ_CLS" : "CAUSAL_LM");

  // The source model, adapted alike, with the adapter file's tensors: in float32 what peft
  // computes on the source, and with its frozen weights in bfloat16 what bigbatch computed.
  HfModel again = load_hf_model(fixture_dir(GetParam().name), GetParam().num_labels);
  nn::apply_lora(*again.module(), lora_of(GetParam()));
  load_peft(again, dir_.path() / "peft");
  const torch::Tensor float32_logits = logits_of(again, in);
  nn::store_frozen_weights(*again.module(), torch::kBFloat16);
  EXPECT_LE(max_difference(logits_of(again, in), logits, in), round_trip_tolerance(logits));
  // As predict and generate load it: the adapter directory on its base, a classifier with the
  // classes of its saved head.
  const HfModel loaded = load_hf_model_with_peft_adapter((dir_.path() / "peft").string(),
                                                         fixture_dir(GetParam().name));
  EXPECT_EQ(loaded.outputs(), model.outputs());
  EXPECT_LE(max_difference(logits_of(loaded, in), float32_logits, in),
            round_trip_tolerance(float32_logits));
  check_in_python(model, "peft", HfExportMode::kPeft, float32_logits, in);
}

INSTANTIATE_TEST_SUITE_P(
    HfExportTinyModels, HfExportRoundTrip,
    ::testing::Values(Fixture{"tiny-gpt2", 0, {"c_attn", "c_proj", "c_fc"}, {}},
                      Fixture{"tiny-llama", 0, {"q_proj", "v_proj", "o_proj", "gate_proj"}, {}},
                      Fixture{"tiny-qwen2", 0, {"q_proj", "k_proj", "v_proj"}, {}},
                      Fixture{"tiny-qwen3", 0, {"q_proj", "k_proj", "o_proj", "down_proj"}, {}},
                      Fixture{"tiny-mistral", 0, {"q_proj", "v_proj", "up_proj"}, {}},
                      Fixture{"tiny-gemma3", 0, {"q_proj", "v_proj", "gate_proj"}, {}},
                      Fixture{"tiny-gemma2", 0, {"k_proj", "o_proj", "down_proj"}, {}},
                      Fixture{"tiny-bert", 0, {"query", "value"}, {"classifier"}},
                      Fixture{"tiny-bert-encoder", 4, {"query", "key"}, {"classifier"}},
                      Fixture{"tiny-roberta", 0, {"query", "value"}, {"classifier"}},
                      Fixture{"tiny-roberta-mlm", 4, {"value", "output.dense"}, {}},
                      Fixture{"tiny-distilbert", 0, {"q_lin", "v_lin", "lin2"}, {}},
                      Fixture{"tiny-distilbert-mlm", 2, {"k_lin", "lin1"}, {}},
                      Fixture{"tiny-electra", 0, {"query", "value"}, {"classifier"}},
                      Fixture{"tiny-electra-discriminator", 2, {"key", "intermediate.dense"}, {}},
                      Fixture{"tiny-modernbert", 0, {"Wqkv", "Wi"}, {"classifier"}},
                      Fixture{"tiny-modernbert-mlm", 2, {"Wqkv", "attn.Wo"}, {}}),
    [](const ::testing::TestParamInfo<Fixture>& param_info) {
      std::string name = param_info.param.name;
      for (char& c : name)
        c = c == '-' ? '_' : c;
      return name;
    });

// The merged export's config.json: the class it now is, float32, the classes with their names,
// every other field as it was; the tokenizer files come along.
TEST(HfExportFiles, ConfigAndTokenizerFiles) {
  testing::TempDir dir;
  const fs::path source = dir.path() / "source";
  fs::copy(fixture_dir("tiny-bert-encoder"), source, fs::copy_options::recursive);
  dir.write("source/tokenizer.json", "{\"tokenizer\": 1}");
  dir.write("source/vocab.txt", "[PAD]\n");
  const HfModel model = load_hf_model(source.string(), 2);
  const auto files = save_hf_model(model, HfExportOptions()
                                              .source_directory(source.string())
                                              .output_directory((dir.path() / "out").string())
                                              .class_names({"negative", "positive"}));
  EXPECT_EQ(files[0], "config.json");
  EXPECT_EQ(files[1], "model.safetensors");
  EXPECT_NE(std::find(files.begin(), files.end(), "tokenizer.json"), files.end());
  EXPECT_NE(std::find(files.begin(), files.end(), "vocab.txt"), files.end());
  EXPECT_EQ(testing::read_file(dir.path() / "out" / "tokenizer.json"), "{\"tokenizer\": 1}");
  const json before = json::parse(testing::read_file(source / "config.json"));
  const json after = json::parse(testing::read_file(dir.path() / "out" / "config.json"));
  EXPECT_EQ(after["architectures"], json::array({"BertForSequenceClassification"}));
  EXPECT_EQ(after["dtype"], "float32");
  EXPECT_EQ(after["id2label"], json({{"0", "negative"}, {"1", "positive"}}));
  EXPECT_EQ(after["label2id"], json({{"negative", 0}, {"positive", 1}}));
  for (const auto& [key, value] : before.items()) {
    if (key != "architectures" && key != "id2label" && key != "label2id" && key != "dtype") {
      EXPECT_EQ(after[key], value) << key;
    }
  }
  EXPECT_EQ(after.size(), before.size());
  // Nothing left behind: the partial directory was renamed.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find(".partial-"), std::string::npos);
}

TEST(HfExportFiles, TiedEmbeddingsAreWrittenOnce) {
  testing::TempDir dir;
  const HfModel model = load_hf_model(fixture_dir("tiny-qwen2"));
  save_hf_model(model, HfExportOptions()
                           .source_directory(fixture_dir("tiny-qwen2"))
                           .output_directory((dir.path() / "out").string()));
  const io::Safetensors saved =
      io::read_safetensors((dir.path() / "out/model.safetensors").string());
  EXPECT_EQ(saved.find("lm_head.weight"), nullptr);
  EXPECT_NE(saved.find("model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(saved.metadata.at("format"), "pt");
}

TEST(HfExportFiles, MistakesAreNamed) {
  testing::TempDir dir;
  const std::string gpt2 = fixture_dir("tiny-gpt2");
  const std::string out = (dir.path() / "out").string();
  const HfModel model = load_hf_model(gpt2);
  const auto base = HfExportOptions().source_directory(gpt2).output_directory(out);

  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(model, HfExportOptions(base).source_directory("/no/such/model"));
            }).find("HfExportOptions.source_directory \"/no/such/model\" is not a directory"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(model,
                            HfExportOptions(base).source_directory(fixture_dir("tiny-llama")));
            }).find("holds a llama model, not the gpt2"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(model, HfExportOptions(base).output_directory(""));
            }).find("HfExportOptions.output_directory is empty"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(model, HfExportOptions(base).mode(HfExportMode::kPeft));
            }).find("the gpt2 model has no LoRA adapters"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));

  // An output directory that holds files: refused unless overwrite, which replaces it.
  dir.write("out/keep.txt", "mine");
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(model, base);
            }).find("HfExportOptions.output_directory \"" + out + "\" already holds files"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(dir.path() / "out/keep.txt"));
  save_hf_model(model, HfExportOptions(base).overwrite(true));
  EXPECT_FALSE(fs::exists(dir.path() / "out/keep.txt"));
  EXPECT_TRUE(fs::exists(dir.path() / "out/model.safetensors"));

  // A classifier: class names of another count; a trained pooler PEFT would not save (its
  // classifier head it saves whole by itself).
  const std::string bert = fixture_dir("tiny-bert");
  HfModel classifier = load_hf_model(bert);
  const auto bert_base =
      HfExportOptions().source_directory(bert).output_directory((dir.path() / "bert").string());
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(classifier, HfExportOptions(bert_base).class_names({"a", "b"}));
            }).find("HfExportOptions.class_names has 2 names for a classifier of 3 classes"),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(classifier, HfExportOptions(bert_base).class_names({"a", "b", "a"}));
            }).find("\"a\" names two classes"),
            std::string::npos);
  nn::apply_lora(*classifier.module(), nn::LoraOptions().targets({"query"}).trainable(
                                           {"classifier", "bert.pooler.dense"}));
  const auto peft = HfExportOptions(bert_base).mode(HfExportMode::kPeft);
  EXPECT_NE(
      testing::input_error_of([&] { save_hf_model(classifier, peft); })
          .find("the trainable parameter \"bert.pooler.dense.weight\" is neither an adapter's nor "
                "in HfExportOptions.modules_to_save"),
      std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              save_hf_model(classifier, HfExportOptions(peft).modules_to_save({"clasifier"}));
            }).find("HfExportOptions.modules_to_save: \"clasifier\" names no module"),
            std::string::npos);
  EXPECT_NE(
      testing::input_error_of([&] {
        save_hf_model(classifier, HfExportOptions(peft).modules_to_save({"classifier", "self"}));
      }).find("holds the adapted module"),
      std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "bert"));
}

}  // namespace
}  // namespace bigbatch::models
