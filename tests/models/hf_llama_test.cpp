// models::HfLlama against Hugging Face transformers: logits and loss of the tiny random Llama
// (grouped-query attention, llama3 RoPE scaling, untied head), Qwen2 (q/k/v biases, tied
// embeddings), Qwen3 (query and key norms, a sliding window on one layer), Mistral (a sliding
// window on every layer), Gemma 3's text model and Gemma 2 (soft-capped attention scores) that
// tests/hf/make_tiny_llama.py made, and every unsupported config named.
#include "bigbatch/models/hf_llama.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;

using testing::hf_dir;

/// Loads `name`, runs its golden ids and checks logits and loss against transformers'.
void expect_transformers_logits(const std::string& name) {
  const nlohmann::json g = nlohmann::json::parse(testing::read_file(hf_dir(name + "-golden.json")));
  HfLlama model = load_hf_llama(hf_dir(name));
  model->eval();
  std::vector<int64_t> flat;
  for (const auto& row : g["input_ids"])
    for (int64_t id : row.get<std::vector<int64_t>>())
      flat.push_back(id);
  const torch::Tensor ids =
      torch::tensor(flat, torch::kLong).view({int64_t(g["input_ids"].size()), -1});
  const torch::Tensor expected =
      torch::tensor(g["logits_eager"].get<std::vector<double>>(), torch::kFloat)
          .view(g["logits_shape"].get<std::vector<int64_t>>());
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(ids);  // (B, T, V)
  EXPECT_LE((logits - expected).abs().max().item<double>(), 1e-5) << name;
  EXPECT_GT(expected.abs().max().item<double>(), 0.1) << name;
  const torch::Tensor loss = torch::cross_entropy_loss(
      logits.slice(1, 0, -1).reshape({-1, logits.size(2)}), ids.slice(1, 1).reshape({-1}));
  EXPECT_NEAR(loss.item<double>(), g["loss_eager"].get<double>(), 1e-6) << name;
  if (nn::fused_attention_available()) {
    nn::set_attention_kernel(nn::AttentionKernel::kFused, "test");
    const torch::Tensor fused = model->forward(ids);
    nn::set_attention_kernel(nn::AttentionKernel::kAuto, "test");
    EXPECT_LE((fused - expected).abs().max().item<double>(), 1e-5) << name;
  }
}

TEST(HfLlama, LlamaWithGqaAndLlama3RopeGivesTransformersLogits) {
  expect_transformers_logits("tiny-llama");
}

TEST(HfLlama, Qwen2WithBiasesAndTiedEmbeddingsGivesTransformersLogits) {
  expect_transformers_logits("tiny-qwen2");
}

TEST(HfLlama, Qwen3WithQkNormsAndASlidingLayerGivesTransformersLogits) {
  expect_transformers_logits("tiny-qwen3");
}

TEST(HfLlama, MistralWithASlidingWindowGivesTransformersLogits) {
  expect_transformers_logits("tiny-mistral");
}

TEST(HfLlama, Gemma3TextGivesTransformersLogits) {
  expect_transformers_logits("tiny-gemma3");
}

TEST(HfLlama, Gemma2WithAttentionSoftCappingGivesTransformersLogits) {
  expect_transformers_logits("tiny-gemma2");
}

TEST(HfLlama, RightPaddingLongerThanASlidingWindowLeavesTheRealTokensAlone) {
  HfLlama model = load_hf_llama(hf_dir("tiny-mistral"));  // a window of 8
  model->eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const torch::Tensor ids = torch::randint(model->config().vocab_size(), {2, 20}, torch::kLong);
  torch::Tensor mask = torch::ones({2, 20}, torch::kLong);
  mask[1].slice(0, 10).fill_(0);  // row 1: 10 real tokens, then 10 of padding
  std::vector<nn::AttentionKernel> kernels{nn::AttentionKernel::kComposite};
  if (nn::fused_attention_available())
    kernels.push_back(nn::AttentionKernel::kFused);
  for (const nn::AttentionKernel kernel : kernels) {
    nn::set_attention_kernel(kernel, "test");
    const torch::Tensor padded = model->forward(ids, mask);                          // (2, 20, V)
    const torch::Tensor alone = model->forward(ids.slice(0, 1, 2).slice(1, 0, 10));  // (1, 10, V)
    const torch::Tensor first = model->forward(ids.slice(0, 0, 1));                  // (1, 20, V)
    nn::set_attention_kernel(nn::AttentionKernel::kAuto, "test");
    // The last padded positions see only padding in their window: finite all the same, and the
    // real tokens of both rows get what they get alone.
    EXPECT_TRUE(torch::isfinite(padded).all().item<bool>()) << nn::to_string(kernel);
    EXPECT_LE((padded[1].slice(0, 0, 10) - alone[0]).abs().max().item<double>(), 1e-5);
    EXPECT_LE((padded[0] - first[0]).abs().max().item<double>(), 1e-5);
  }
}

TEST(HfLlama, TheModelsAreWhatTheirConfigsSay) {
  HfLlama llama = load_hf_llama(hf_dir("tiny-llama"));
  EXPECT_EQ(llama->config().rope_scaling(), RopeScaling::kLlama3);
  EXPECT_EQ(llama->config().num_key_value_heads(), 2);
  EXPECT_TRUE(llama->lm_head_weight.defined());
  HfLlama qwen = load_hf_llama(hf_dir("tiny-qwen2"));
  EXPECT_FALSE(qwen->lm_head_weight.defined());
  EXPECT_TRUE(qwen->layers[0]->as<HfLlamaLayer>()->self_attn->q_proj->bias.defined());
  EXPECT_FALSE(qwen->layers[0]->as<HfLlamaLayer>()->self_attn->o_proj->bias.defined());
  EXPECT_EQ(qwen->config().attention_window(0), 0);
  HfLlama qwen3 = load_hf_llama(hf_dir("tiny-qwen3"));
  const auto& attention = qwen3->layers[0]->as<HfLlamaLayer>()->self_attn;
  EXPECT_EQ(attention->q_norm->weight.sizes(), torch::IntArrayRef({16}));
  EXPECT_FALSE(attention->q_proj->bias.defined());
  EXPECT_EQ(attention->q_proj->weight.sizes(), torch::IntArrayRef({64, 32}));  // 4 heads x 16
  EXPECT_EQ(qwen3->config().attention_window(0), 0);
  EXPECT_EQ(qwen3->config().attention_window(1), 8);
  HfLlama mistral = load_hf_llama(hf_dir("tiny-mistral"));
  EXPECT_EQ(mistral->config().attention_window(0), 8);
  EXPECT_EQ(mistral->config().attention_window(1), 8);
  EXPECT_FALSE(mistral->layers[0]->as<HfLlamaLayer>()->self_attn->q_norm);
  EXPECT_FALSE(mistral->layers[0]->as<HfLlamaLayer>()->pre_feedforward_layernorm);
  HfLlama gemma = load_hf_llama(hf_dir("tiny-gemma3"));
  EXPECT_TRUE(gemma->layers[1]->as<HfLlamaLayer>()->post_feedforward_layernorm);
  EXPECT_TRUE(gemma->layers[1]->as<HfLlamaLayer>()->self_attn->k_norm);
  EXPECT_FALSE(gemma->lm_head_weight.defined());
  EXPECT_EQ(gemma->config().attention_window(0), 8);
  EXPECT_EQ(gemma->config().attention_window(1), 0);
  HfLlama gemma2 = load_hf_llama(hf_dir("tiny-gemma2"));
  EXPECT_EQ(gemma2->config().attn_logit_softcapping(), 0.05);
  EXPECT_FALSE(gemma2->layers[0]->as<HfLlamaLayer>()->self_attn->q_norm);
  EXPECT_TRUE(gemma2->layers[0]->as<HfLlamaLayer>()->pre_feedforward_layernorm);
  EXPECT_EQ(gemma2->config().sliding_rope_theta(), 0.0);
  // A fresh Gemma norm is the identity: its weight starts at 0 and scales by 1 + weight.
  RmsNorm fresh(4, 1e-6, /*plus_one=*/true);
  const torch::Tensor x = torch::tensor({1.0, -2.0, 3.0, 0.5});
  EXPECT_TRUE(torch::allclose(fresh->forward(x), x / x.square().mean().add(1e-6).sqrt()));
}

/// read_hf_llama_config of `name`'s config.json, edited.
HfLlamaConfig edited_config(const std::string& name,
                            const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = nlohmann::json::parse(testing::read_file(hf_dir(name) + "/config.json"));
  edit(config);
  io::HfConfig reader(config, "config.json");
  return read_hf_llama_config(reader);
}

TEST(HfLlamaConfig, QwenSlidingLayersFollowMaxWindowLayersWithoutLayerTypes) {
  // Configs from before transformers 4.53 have no layer_types: layers from max_window_layers on
  // slide when use_sliding_window is true (Qwen2Config's rule), none when it is false.
  const auto without_types = [](bool used) {
    return [used](nlohmann::json& c) {
      c.erase("layer_types");
      c["use_sliding_window"] = used;
    };
  };
  EXPECT_EQ(edited_config("tiny-qwen3", without_types(true)).sliding_layers(),
            std::vector<bool>({false, true}));
  const HfLlamaConfig unused = edited_config("tiny-qwen3", without_types(false));
  EXPECT_EQ(unused.attention_window(0), 0);
  EXPECT_EQ(unused.attention_window(1), 0);
  const HfLlamaConfig qwen2 = edited_config("tiny-qwen2", [](nlohmann::json& c) {
    c["use_sliding_window"] = true;
    c["sliding_window"] = 4;
    c["max_window_layers"] = 0;
    c.erase("layer_types");
  });
  EXPECT_EQ(qwen2.attention_window(0), 4);
  EXPECT_EQ(qwen2.attention_window(1), 4);
  // Mistral 7B v0.3 and later: sliding_window null, no window.
  EXPECT_EQ(edited_config("tiny-mistral", [](nlohmann::json& c) { c["sliding_window"] = nullptr; })
                .attention_window(0),
            0);
}

/// A copy of the tiny Llama's config.json, edited, read by read_hf_llama_config.
std::string config_error(const std::function<void(nlohmann::json&)>& edit) {
  return testing::input_error_of([&] { edited_config("tiny-llama", edit); });
}

TEST(HfLlamaConfig, UnsupportedSettingsAreNamed) {
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["hidden_act"] = "gelu"; }),
            "config.json: unsupported \"hidden_act\": \"gelu\" (bigbatch supports only \"silu\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["sliding_window"] = 4096; }),
            "config.json: unsupported \"sliding_window\": 4096 (bigbatch supports only null)");
  EXPECT_EQ(config_error([](nlohmann::json& c) {
              c["model_type"] = "mistral";
              c["sliding_window"] = 0;
            }),
            "config.json: sliding_window must be a positive integer, got 0");
  EXPECT_EQ(config_error([](nlohmann::json& c) {
              c["model_type"] = "qwen3";
              c["use_sliding_window"] = true;
              c["layer_types"] = {"full_attention", "chunked_attention"};
            }),
            "config.json: unsupported layer_types[1] \"chunked_attention\" (bigbatch supports "
            "\"full_attention\" and \"sliding_attention\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) {
              c["model_type"] = "qwen2";
              c["layer_types"] = {"full_attention", "sliding_attention"};
            }),
            "config.json: unsupported layer_types[1] \"sliding_attention\" (without "
            "use_sliding_window bigbatch supports only \"full_attention\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) {
              c["model_type"] = "qwen2";
              c["layer_types"] = {"full_attention"};
            }),
            "config.json: layer_types must list num_hidden_layers = 2 layer types, got "
            "[\"full_attention\"]");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["rope_parameters"]["rope_type"] = "yarn"; }),
            "config.json: rope_parameters: unsupported RoPE type \"yarn\" (bigbatch supports "
            "\"default\", \"linear\" and \"llama3\")");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["rope_parameters"]["beta_fast"] = 32; }),
            "config.json: rope_parameters: unsupported RoPE field \"beta_fast\" = 32");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["model_type"] = "gemma"; }),
            "config.json: model_type \"gemma\" is not one of \"llama\", \"mistral\", "
            "\"qwen2\", \"qwen3\", \"gemma2\", \"gemma3_text\"");
  EXPECT_EQ(config_error([](nlohmann::json& c) { c["num_key_value_heads"] = 3; }),
            "config.json: num_key_value_heads = 3 must divide num_attention_heads = 4");
  EXPECT_NE(config_error([](nlohmann::json& c) {
              c["qk_norm"] = true;
            }).find("unsupported field(s) for the Llama family (llama): \"qk_norm\" = true"),
            std::string::npos);
}

TEST(HfLlamaConfig, Gemma3ConfigsFromBeforeTransformers5Read) {
  // google/gemma-3-1b-it's form: sliding_window_pattern instead of layer_types, RoPE as
  // rope_theta (full layers, with rope_scaling) and rope_local_base_freq (sliding layers).
  const HfLlamaConfig read = edited_config("tiny-gemma3", [](nlohmann::json& c) {
    c.erase("layer_types");
    c.erase("rope_parameters");
    c["num_hidden_layers"] = 7;
    c["sliding_window_pattern"] = 3;
    c["rope_theta"] = 1000000;
    c["rope_local_base_freq"] = 10000;
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
    c["cache_implementation"] = "hybrid";
  });
  EXPECT_EQ(read.sliding_layers(), std::vector<bool>({true, true, false, true, true, false, true}));
  EXPECT_EQ(read.rope_theta(), 1000000.0);
  EXPECT_EQ(read.rope_scaling(), RopeScaling::kLinear);
  EXPECT_EQ(read.sliding_rope_theta(), 10000.0);
  EXPECT_TRUE(read.norm_plus_one() && read.sandwich_norms() && read.gelu_gate() &&
              read.scale_embeddings() && read.qk_norm());
  EXPECT_EQ(read.query_pre_attn_scalar(), 24.0);
  // The sliding layers' RoPE is unscaled, from its own theta.
  HfLlamaConfig local = read;
  local.rope_theta(10000.0).rope_scaling(RopeScaling::kNone);
  EXPECT_TRUE(
      torch::equal(sliding_rope_inverse_frequencies(read), rope_inverse_frequencies(local)));
  // Without sliding_window_pattern: every 6th layer is full.
  const HfLlamaConfig six = edited_config("tiny-gemma3", [](nlohmann::json& c) {
    c.erase("layer_types");
    c["num_hidden_layers"] = 6;
  });
  EXPECT_EQ(six.sliding_layers(), std::vector<bool>({true, true, true, true, true, false}));
}

TEST(HfLlamaConfig, Gemma2ConfigsFromBeforeTransformers5Read) {
  // google/gemma-2-2b's form: no layer_types (every second layer full), hidden_act beside
  // hidden_activation, rope_theta.
  const HfLlamaConfig read = edited_config("tiny-gemma2", [](nlohmann::json& c) {
    c.erase("layer_types");
    c.erase("rope_parameters");
    c["num_hidden_layers"] = 5;
    c["hidden_act"] = "gelu_pytorch_tanh";
    c["rope_theta"] = 10000.0;
    c["cache_implementation"] = "hybrid";
    c["eos_token_id"] = {1, 107};
  });
  EXPECT_EQ(read.sliding_layers(), std::vector<bool>({true, false, true, false, true}));
  EXPECT_EQ(read.rope_theta(), 10000.0);
  EXPECT_EQ(read.attn_logit_softcapping(), 0.05);
  EXPECT_EQ(read.final_logit_softcapping(), 3.0);
  EXPECT_FALSE(read.qk_norm());
}

TEST(HfLlamaConfig, Gemma3SettingsBigbatchDoesNotImplementAreNamed) {
  const auto gemma_error = [](const std::function<void(nlohmann::json&)>& edit) {
    return testing::input_error_of([&] { edited_config("tiny-gemma3", edit); });
  };
  EXPECT_EQ(gemma_error([](nlohmann::json& c) { c["attn_logit_softcapping"] = 50.0; }),
            "config.json: unsupported \"attn_logit_softcapping\": 50.0 (bigbatch supports only "
            "null)");
  EXPECT_EQ(gemma_error([](nlohmann::json& c) { c["use_bidirectional_attention"] = true; }),
            "config.json: unsupported \"use_bidirectional_attention\": true (bigbatch supports "
            "only false)");
  EXPECT_EQ(gemma_error([](nlohmann::json& c) { c["hidden_activation"] = "silu"; }),
            "config.json: unsupported \"hidden_activation\": \"silu\" (bigbatch supports only "
            "\"gelu_pytorch_tanh\")");
  EXPECT_EQ(gemma_error([](nlohmann::json& c) {
              c["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
              c["rope_parameters"]["sliding_attention"]["factor"] = 2.0;
            }),
            "config.json: the sliding layers' RoPE must be of type \"default\" (bigbatch scales "
            "only the full layers')");
  EXPECT_EQ(gemma_error([](nlohmann::json& c) { c["rope_parameters"]["chunked_attention"] = {}; }),
            "config.json: rope_parameters: unsupported layer type \"chunked_attention\" "
            "(bigbatch supports \"full_attention\" and \"sliding_attention\")");
  EXPECT_EQ(gemma_error([](nlohmann::json& c) { c["sliding_window"] = nullptr; }),
            "config.json: sliding_window must be a positive integer, got null");
}

TEST(HfLlamaConfig, OlderConfigsWithRopeThetaAndRopeScalingRead) {
  nlohmann::json config =
      nlohmann::json::parse(testing::read_file(hf_dir("tiny-llama") + "/config.json"));
  config.erase("rope_parameters");
  config["rope_theta"] = 500000.0;
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  io::HfConfig reader(config, "config.json");
  const HfLlamaConfig read = read_hf_llama_config(reader);
  EXPECT_EQ(read.rope_theta(), 500000.0);
  EXPECT_EQ(read.rope_scaling(), RopeScaling::kLinear);
  HfLlamaConfig unscaled = read;
  unscaled.rope_scaling(RopeScaling::kNone);
  EXPECT_TRUE(
      torch::allclose(rope_inverse_frequencies(read) * 2.0, rope_inverse_frequencies(unscaled)));
}

}  // namespace
}  // namespace bigbatch::models
