// models::KvCache: HfGpt2 and HfLlama fed a prompt and then one token at a time give the logits
// of a forward over all the tokens, in fp32 (on both attention kernels) and under bf16 autocast;
// generate_ids draws the same ids with the cache as without, and greedily the ids transformers'
// generate draws; misuse is named.
#include "bigbatch/models/kv_cache.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/models/hf_model.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/precision.h"
#include "support/hf_fixtures.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using testing::hf_dir;

/// ids (B, T) drawn from the first `vocab` ids with a fixed seed.
torch::Tensor random_ids(int64_t batch, int64_t time, int64_t vocab) {
  torch::manual_seed(11);
  return torch::randint(vocab, {batch, time}, torch::kLong);
}

/// Largest difference between the logits of one forward over ids (B, T) and those of a cached
/// forward fed the first `prompt` ids and then one id at a time.
double cached_against_whole(const HfModel& model, const torch::Tensor& ids, int64_t prompt) {
  const CausalLm lm = model.causal_lm();
  const torch::Tensor whole = lm.forward(ids);  // (B, T, V)
  KvCache cache;
  std::vector<torch::Tensor> steps{lm.forward_cached(ids.slice(1, 0, prompt), cache)};
  for (int64_t t = prompt; t < ids.size(1); ++t)
    steps.push_back(lm.forward_cached(ids.slice(1, t, t + 1), cache));  // (B, 1, V)
  EXPECT_EQ(cache.length(), ids.size(1));
  const torch::Tensor cached = torch::cat(steps, /*dim=*/1);  // (B, T, V)
  EXPECT_EQ(cached.sizes(), whole.sizes());
  return (cached.to(torch::kFloat) - whole.to(torch::kFloat)).abs().max().item<double>();
}

class CachedForward : public ::testing::TestWithParam<std::string> {};

TEST_P(CachedForward, GivesTheLogitsOfTheWholeSequence) {
  const HfModel model = load_hf_model(hf_dir(GetParam()));
  model.module()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = random_ids(2, 12, model.outputs());  // (2, 12)
  EXPECT_LE(cached_against_whole(model, ids, /*prompt=*/5), 1e-5);
  EXPECT_LE(cached_against_whole(model, ids, /*prompt=*/1), 1e-5);
  EXPECT_LE(cached_against_whole(model, ids, /*prompt=*/10), 1e-5);  // past a sliding window of 8
  if (nn::fused_attention_available()) {
    nn::set_attention_kernel(nn::AttentionKernel::kFused, "test");
    const double fused = cached_against_whole(model, ids, 5);
    nn::set_attention_kernel(nn::AttentionKernel::kAuto, "test");
    EXPECT_LE(fused, 1e-5);
  }
}

TEST_P(CachedForward, GivesTheLogitsOfTheWholeSequenceUnderBf16Autocast) {
  const HfModel model = load_hf_model(hf_dir(GetParam()));
  model.module()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = random_ids(1, 12, model.outputs());  // (1, 12)
  const nn::AutocastGuard autocast(nn::Precision::kBf16, torch::kCPU);
  // The bf16 attention kernels take one query against many keys. Products of one row and of
  // twelve may sum in another order, so not bitwise: within a few bf16 roundings of the logits.
  EXPECT_LE(cached_against_whole(model, ids, 4), 0.01);
}

TEST_P(CachedForward, GenerateDrawsTheSameIdsWithTheCacheAsWithout) {
  const HfModel model = load_hf_model(hf_dir(GetParam()));
  model.module()->eval();
  torch::NoGradGuard no_grad;
  const CausalLm lm = model.causal_lm();
  const std::vector<int64_t> prompt{3, 9, 4};
  // Past the 8-id context the window slides and every step is a whole forward again.
  for (const SampleOptions& options :
       {SampleOptions().top_k(1).max_new_bytes(12), SampleOptions().max_new_bytes(12).seed(5)}) {
    const std::vector<int64_t> cached = generate_ids(lm, prompt, /*context=*/8, options);
    const std::vector<int64_t> whole = generate_ids(lm.forward, prompt, 8, options);
    EXPECT_EQ(cached.size(), 12u);
    EXPECT_EQ(cached, whole);
  }
}

TEST_P(CachedForward, GreedyGenerationContinuesAsTransformersDoes) {
  // tests/hf/make_generate_golden.py: model.generate(do_sample=False, use_cache=True) until the
  // positions are full.
  const nlohmann::json golden = nlohmann::json::parse(testing::read_file(
      std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/generate-golden.json"))[GetParam()];
  const auto expected = golden["new_ids"].get<std::vector<int64_t>>();
  const HfModel model = load_hf_model(hf_dir(GetParam()));
  model.module()->eval();
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> generated = generate_ids(
      model.causal_lm(), golden["prompt"].get<std::vector<int64_t>>(), model.max_positions(),
      SampleOptions().top_k(1).max_new_bytes(int64_t(expected.size())));
  EXPECT_EQ(generated, expected);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, CachedForward,
                         ::testing::Values("tiny-gpt2", "tiny-llama", "tiny-qwen2", "tiny-qwen3",
                                           "tiny-mistral", "tiny-gemma3", "tiny-gemma2"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           name.erase(name.find('-'), 1);
                           return name;
                         });

TEST(KvCache, MoreThanOneTokenAfterCachedOnesOrPastThePositionsIsRefused) {
  const HfModel model = load_hf_model(hf_dir("tiny-llama"));
  model.module()->eval();
  torch::NoGradGuard no_grad;
  const int64_t positions = model.max_positions();
  HfLlama llama = model.llama;
  KvCache cache;
  llama->forward(random_ids(1, 3, 50), cache);
  std::string message =
      testing::input_error_of([&] { llama->forward(random_ids(1, 2, 50), cache); });
  EXPECT_NE(message.find("holds 3 tokens, so a forward may add only one more, got 2"),
            std::string::npos)
      << message;
  EXPECT_EQ(cache.length(), 3);  // nothing was added
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
  llama->forward(random_ids(1, positions, 50), cache);
  message = testing::input_error_of([&] { llama->forward(random_ids(1, 1, 50), cache); });
  EXPECT_NE(message.find(std::to_string(positions) +
                         " cached + 1 new tokens exceed "
                         "max_position_embeddings = " +
                         std::to_string(positions)),
            std::string::npos)
      << message;
}

TEST(KvCache, ASlidingLayerHoldsOnlyTheKeysTheNextTokenSees) {
  // tiny-qwen3: layer 0 full, layer 1 sliding over 8 keys; tiny-mistral: both sliding.
  for (const auto& [name, full_layers] : std::vector<std::pair<std::string, std::vector<bool>>>{
           {"tiny-qwen3", {true, false}}, {"tiny-mistral", {false, false}}}) {
    const HfModel model = load_hf_model(hf_dir(name));
    model.module()->eval();
    torch::NoGradGuard no_grad;
    const CausalLm lm = model.causal_lm();
    const torch::Tensor ids = random_ids(1, 15, model.outputs());  // (1, 15)
    KvCache cache;
    lm.forward_cached(ids.slice(1, 0, 5), cache);
    EXPECT_EQ(cache.held(1), 5) << name;  // fewer than the window: all of them
    for (int64_t t = 5; t < 15; ++t)
      lm.forward_cached(ids.slice(1, t, t + 1), cache);
    EXPECT_EQ(cache.length(), 15) << name;
    for (size_t layer = 0; layer < 2; ++layer)
      EXPECT_EQ(cache.held(layer), full_layers[layer] ? 15 : 7) << name << " layer " << layer;
  }
}

TEST(KvCache, AClassifierHasNoCausalLm) {
  const HfModel model = load_hf_model(hf_dir("tiny-bert"));
  const std::string message = testing::input_error_of([&] { model.causal_lm(); });
  EXPECT_NE(message.find("bert classifier does not generate text"), std::string::npos) << message;
}

}  // namespace
}  // namespace bigbatch::models
