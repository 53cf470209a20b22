// models::HfGpt2 against Hugging Face transformers: logits and loss of the tiny random GPT-2 that
// tests/hf/make_tiny_gpt2.py made (its golden values), padding, both attention kernels, and every
// bad model directory named.
#include "bigbatch/models/hf_gpt2.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "bigbatch/io/safetensors.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-gpt2";

nlohmann::json golden() {
  return nlohmann::json::parse(
      testing::read_file(std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-gpt2-golden.json"));
}

torch::Tensor golden_ids(const nlohmann::json& g) {
  std::vector<int64_t> flat;
  for (const auto& row : g["input_ids"])
    for (int64_t id : row.get<std::vector<int64_t>>())
      flat.push_back(id);
  return torch::tensor(flat, torch::kLong).view({int64_t(g["input_ids"].size()), -1});
}

torch::Tensor golden_logits(const nlohmann::json& g, const std::string& key) {
  return torch::tensor(g[key].get<std::vector<double>>(), torch::kFloat)
      .view(g["logits_shape"].get<std::vector<int64_t>>());
}

TEST(HfGpt2, LogitsAndLossAreThoseOfTransformers) {
  const nlohmann::json g = golden();
  HfGpt2 model = load_hf_gpt2(kTiny);
  model->eval();
  const torch::Tensor ids = golden_ids(g);
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(ids);  // (B, T, V)
  for (const char* key : {"logits_eager", "logits_sdpa"}) {
    EXPECT_LE((logits - golden_logits(g, key)).abs().max().item<double>(), 1e-5) << key;
  }
  // transformers' loss with labels = ids: next-token cross-entropy, mean over B x (T - 1).
  const int64_t vocab = logits.size(2);
  const torch::Tensor loss = torch::cross_entropy_loss(logits.slice(1, 0, -1).reshape({-1, vocab}),
                                                       ids.slice(1, 1).reshape({-1}));
  EXPECT_NEAR(loss.item<double>(), g["loss_eager"].get<double>(), 1e-6);
}

TEST(HfGpt2, BothAttentionKernelsAndRightPaddingGiveTheSameLogits) {
  HfGpt2 model = load_hf_gpt2(kTiny);
  model->eval();
  const torch::Tensor ids = golden_ids(golden());
  torch::NoGradGuard no_grad;
  const torch::Tensor reference = model->forward(ids);
  if (nn::fused_attention_available()) {
    nn::set_attention_kernel(nn::AttentionKernel::kFused, "test");
    const torch::Tensor fused = model->forward(ids);
    nn::set_attention_kernel(nn::AttentionKernel::kAuto, "test");
    EXPECT_LE((fused - reference).abs().max().item<double>(), 1e-5);
  }
  // The second row cut to 7 tokens and right-padded: its real positions keep their logits.
  torch::Tensor padded = ids.clone();
  padded.index_put_({1, torch::indexing::Slice(7)}, 0);
  torch::Tensor mask = torch::ones_like(ids);
  mask.index_put_({1, torch::indexing::Slice(7)}, 0);
  const torch::Tensor out = model->forward(padded, mask);
  EXPECT_LE((out.index({1, torch::indexing::Slice(0, 7)}) -
             reference.index({1, torch::indexing::Slice(0, 7)}))
                .abs()
                .max()
                .item<double>(),
            1e-5);
  EXPECT_LE((out[0] - reference[0]).abs().max().item<double>(), 1e-6);
}

/// A copy of the tiny model directory to break.
class BrokenGpt2Directory : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* file : {"config.json", "model.safetensors"})
      fs::copy_file(fs::path(kTiny) / file, dir_.path() / file);
  }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = nlohmann::json::parse(testing::read_file(dir_.path() / "config.json"));
    edit(config);
    dir_.write("config.json", config.dump());
  }
  void edit_weights(const std::function<void(std::vector<io::NamedTensor>&)>& edit) {
    io::Safetensors file = io::read_safetensors((dir_.path() / "model.safetensors").string());
    edit(file.tensors);
    io::write_safetensors((dir_.path() / "model.safetensors").string(), file.tensors);
  }
  std::string error() {
    return testing::input_error_of([&] { load_hf_gpt2(dir_.path().string()); });
  }
  void expect_error(const std::string& part) {
    const std::string message = error();
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
  testing::TempDir dir_;
};

TEST_F(BrokenGpt2Directory, AnUnknownConfigFieldIsNamed) {
  edit_config([](nlohmann::json& c) { c["rotary_dim"] = 16; });
  expect_error(
      "config.json: unsupported field(s) for GPT-2 (GPT2LMHeadModel): \"rotary_dim\" = 16");
}

TEST_F(BrokenGpt2Directory, AnUnsupportedSettingIsNamedWithTheSupportedOne) {
  edit_config([](nlohmann::json& c) { c["scale_attn_by_inverse_layer_idx"] = true; });
  expect_error(
      "config.json: unsupported \"scale_attn_by_inverse_layer_idx\": true (bigbatch "
      "supports only false)");
  edit_config([](nlohmann::json& c) {
    c["scale_attn_by_inverse_layer_idx"] = false;
    c["activation_function"] = "relu";
  });
  expect_error(
      "unsupported \"activation_function\": \"relu\" (bigbatch supports only "
      "\"gelu_new\")");
}

TEST_F(BrokenGpt2Directory, AMissingOrMistypedFieldOrAnotherModelType) {
  edit_config([](nlohmann::json& c) { c.erase("n_layer"); });
  expect_error("config.json: missing field \"n_layer\" (an integer)");
  edit_config([](nlohmann::json& c) { c["n_layer"] = "two"; });
  expect_error("config.json: \"n_layer\" must be an integer, got \"two\"");
  edit_config([](nlohmann::json& c) {
    c["n_layer"] = 2;
    c["model_type"] = "llama";
  });
  expect_error("config.json: model_type \"llama\" is not \"gpt2\"");
  edit_config([](nlohmann::json& c) { c.erase("model_type"); });
  expect_error("config.json: missing field \"model_type\" (expected \"gpt2\")");
}

TEST_F(BrokenGpt2Directory, NoConfig) {
  fs::remove(dir_.path() / "config.json");
  expect_error("(a Hugging Face model directory holds config.json)");
}

TEST_F(BrokenGpt2Directory, ATensorOfTheWrongShapeIsNamedWithBothShapes) {
  edit_weights([](std::vector<io::NamedTensor>& tensors) {
    for (auto& [name, tensor] : tensors) {
      if (name == "transformer.h.1.mlp.c_fc.weight")
        tensor = tensor.t().contiguous();  // (out, in): a Linear's layout, not Conv1D's
    }
  });
  expect_error(
      ": tensor \"transformer.h.1.mlp.c_fc.weight\" has shape [128, 32] but the model's "
      "\"transformer.h.1.mlp.c_fc.weight\" has shape [32, 128]");
}

TEST_F(BrokenGpt2Directory, AMissingAndAnUnexpectedTensorAreNamed) {
  edit_weights([](std::vector<io::NamedTensor>& tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [](const auto& t) { return t.first == "transformer.ln_f.bias"; }),
                  tensors.end());
  });
  expect_error(": the checkpoint lacks \"transformer.ln_f.bias\"");
  edit_weights([](std::vector<io::NamedTensor>& tensors) {
    tensors.emplace_back("transformer.ln_f.bias", torch::zeros({32}));
    tensors.emplace_back("transformer.h.0.attn.q_attn.weight", torch::zeros({32, 32}));
    tensors.emplace_back("transformer.h.0.attn.bias", torch::zeros({1, 1, 32, 32}));  // skipped
  });
  expect_error(
      ": the model has no place for the checkpoint's "
      "\"transformer.h.0.attn.q_attn.weight\"");
}

TEST_F(BrokenGpt2Directory, AGpt2ModelCheckpointWithoutThePrefixLoads) {
  edit_weights([](std::vector<io::NamedTensor>& tensors) {
    for (auto& [name, tensor] : tensors)
      name = name.substr(std::string("transformer.").size());
  });
  HfGpt2 model = load_hf_gpt2(dir_.path().string());
  HfGpt2 reference = load_hf_gpt2(kTiny);
  EXPECT_TRUE(torch::equal(model->h[1]->as<HfGpt2Block>()->mlp->c_fc->weight,
                           reference->h[1]->as<HfGpt2Block>()->mlp->c_fc->weight));
}

}  // namespace
}  // namespace bigbatch::models
