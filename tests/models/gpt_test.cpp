#include "bigbatch/models/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/models/model_info.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using bigbatch::testing::input_error_of;

/// A small model that still has several heads and blocks.
GptOptions small_options() {
  return GptOptions().context(16).layers(2).heads(4).embed(32);
}

/// Random bytes: (batch, time) int64.
torch::Tensor random_bytes(int64_t batch, int64_t time) {
  return torch::randint(256, {batch, time}, torch::kLong);
}

/// Expects `message` to contain every one of `parts`.
void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

TEST(Gpt, ForwardGivesLogitsForEveryPosition) {
  torch::manual_seed(0);
  Gpt model(small_options());
  for (const int64_t time : {1, 5, 16}) {
    const torch::Tensor logits = model->forward(random_bytes(3, time));
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, time, 256}));
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  }
}

TEST(Gpt, IsCausal) {
  torch::manual_seed(1);
  Gpt model(small_options());
  const int64_t t = 7;
  const torch::Tensor inputs = random_bytes(2, 16);
  torch::Tensor changed = inputs.clone();
  changed.index_put_({torch::indexing::Slice(), t},
                     (inputs.index({torch::indexing::Slice(), t}) + 1) % 256);
  const torch::Tensor before = model->forward(inputs);  // (B, T, V)
  const torch::Tensor after = model->forward(changed);  // (B, T, V)
  const auto past = torch::indexing::Slice(0, t);
  EXPECT_TRUE(torch::equal(before.index({torch::indexing::Slice(), past}),
                           after.index({torch::indexing::Slice(), past})));
  for (int64_t b = 0; b < 2; ++b) {
    EXPECT_FALSE(torch::equal(before[b][t], after[b][t])) << "batch row " << b;
  }
}

TEST(Gpt, NamedParametersMatchThePythonMirror) {
  Gpt model(GptOptions().layers(1));
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters())
    names.push_back(item.key());
  const std::vector<std::string> expected = {"tok_embed.weight",
                                             "pos_embed.weight",
                                             "blocks.0.ln1.weight",
                                             "blocks.0.ln1.bias",
                                             "blocks.0.attn.qkv.weight",
                                             "blocks.0.attn.qkv.bias",
                                             "blocks.0.attn.proj.weight",
                                             "blocks.0.attn.proj.bias",
                                             "blocks.0.ln2.weight",
                                             "blocks.0.ln2.bias",
                                             "blocks.0.mlp.fc.weight",
                                             "blocks.0.mlp.fc.bias",
                                             "blocks.0.mlp.proj.weight",
                                             "blocks.0.mlp.proj.bias",
                                             "ln_f.weight",
                                             "ln_f.bias",
                                             "head.weight"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(model->named_buffers().size(), 0u);
  EXPECT_EQ(model->named_parameters()["blocks.0.attn.qkv.weight"].sizes(),
            (std::vector<int64_t>{3 * 128, 128}));
  EXPECT_EQ(model->named_parameters()["head.weight"].sizes(), (std::vector<int64_t>{256, 128}));
}

TEST(Gpt, ParameterCountMatchesHandComputation) {
  // vocab 256, context 16, embed 32, 2 layers. Per block: ln1 2*32, qkv 32*96+96,
  // proj 32*32+32, ln2 2*32, fc 32*128+128, proj 128*32+32 = 12704.
  Gpt small(small_options());
  const int64_t block =
      64 + (32 * 96 + 96) + (32 * 32 + 32) + 64 + (32 * 128 + 128) + (128 * 32 + 32);
  EXPECT_EQ(block, 12704);
  EXPECT_EQ(parameter_count(*small), 256 * 32 + 16 * 32 + 2 * block + 64 + 32 * 256);
  EXPECT_EQ(parameter_count(*small), 42368);
  // Defaults (C=128, L=4, V=256, T=64): 12*C*C*L + 13*C*L + 2*V*C + T*C + 2*C.
  Gpt defaults;
  EXPECT_EQ(parameter_count(*defaults),
            12 * 128 * 128 * 4 + 13 * 128 * 4 + 2 * 256 * 128 + 64 * 128 + 2 * 128);
  EXPECT_EQ(parameter_count(*defaults), 867072);
}

TEST(Gpt, InitialisationFollowsGpt2) {
  torch::manual_seed(2);
  Gpt model;  // 4 layers, embed 128
  auto params = model->named_parameters();
  const auto std_of = [&](const std::string& name) { return params[name].std().item<double>(); };
  EXPECT_NEAR(std_of("tok_embed.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("pos_embed.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("blocks.0.attn.qkv.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("blocks.3.mlp.fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("head.weight"), 0.02, 0.002);
  const double residual = 0.02 / std::sqrt(2.0 * 4);
  EXPECT_NEAR(std_of("blocks.0.attn.proj.weight"), residual, 0.1 * residual);
  EXPECT_NEAR(std_of("blocks.2.mlp.proj.weight"), residual, 0.1 * residual);
  EXPECT_EQ(params["blocks.1.attn.qkv.bias"].abs().max().item<double>(), 0.0);
  EXPECT_EQ(params["blocks.1.mlp.proj.bias"].abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(params["ln_f.weight"], torch::ones({128})));
  EXPECT_TRUE(torch::equal(params["blocks.0.ln2.bias"], torch::zeros({128})));
  EXPECT_FALSE(params["head.weight"].is_same(params["tok_embed.weight"]));
}

TEST(Gpt, Float64ForwardMatchesFloat32) {
  torch::manual_seed(3);
  Gpt model(small_options());
  const torch::Tensor inputs = random_bytes(2, 16);
  const torch::Tensor logits32 = model->forward(inputs);
  model->to(torch::kFloat64);
  const torch::Tensor logits64 = model->forward(inputs);
  EXPECT_EQ(logits64.scalar_type(), torch::kFloat64);
  EXPECT_LT(testing::relative_difference(logits32.to(torch::kFloat64), logits64), 1e-5);
}

TEST(Gpt, ForwardIsDeterministicWithoutDropout) {
  torch::manual_seed(4);
  Gpt model(small_options());
  model->train();
  const torch::Tensor inputs = random_bytes(2, 16);
  EXPECT_TRUE(torch::equal(model->forward(inputs), model->forward(inputs)));
}

TEST(Gpt, DropoutActsOnlyInTrainMode) {
  torch::manual_seed(5);
  Gpt model(small_options().dropout(0.2));
  const torch::Tensor inputs = random_bytes(2, 16);
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(inputs), model->forward(inputs)));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(inputs), model->forward(inputs)));
}

TEST(Gpt, BackwardReachesEveryParameter) {
  torch::manual_seed(6);
  Gpt model(small_options());
  const torch::Tensor inputs = random_bytes(2, 16);
  const torch::Tensor logits = model->forward(inputs);  // (B, T, V)
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), inputs.reshape({-1}));
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0.0) << item.key();
  }
}

TEST(Gpt, InvalidOptionsNameFieldAndValue) {
  expect_contains(input_error_of([] { Gpt(GptOptions().embed(130).heads(4)); }),
                  {"GptOptions.embed", "130", "GptOptions.heads", "4"});
  expect_contains(input_error_of([] { Gpt(GptOptions().layers(-3)); }),
                  {"GptOptions.layers", "-3"});
  expect_contains(input_error_of([] { Gpt(GptOptions().heads(0)); }), {"GptOptions.heads", "0"});
  expect_contains(input_error_of([] { Gpt(GptOptions().vocab(0)); }), {"GptOptions.vocab", "0"});
  expect_contains(input_error_of([] { Gpt(GptOptions().context(-7)); }),
                  {"GptOptions.context", "-7"});
  expect_contains(input_error_of([] { Gpt(GptOptions().dropout(1.5)); }),
                  {"GptOptions.dropout", "1.5"});
  expect_contains(input_error_of([] { Gpt(GptOptions().dropout(-0.25)); }),
                  {"GptOptions.dropout", "-0.25"});
}

TEST(Gpt, InputLongerThanContextOrWrongRankIsAnInputError) {
  Gpt model(small_options());
  expect_contains(input_error_of([&] { model->forward(random_bytes(2, 17)); }), {"17", "16"});
  expect_contains(input_error_of([&] {
                    model->forward(torch::zeros({2, 0}, torch::kLong));
                  }),
                  {"T = 0"});
  expect_contains(input_error_of([&] { model->forward(torch::zeros({16}, torch::kLong)); }),
                  {"[16]", "(B, T)"});
  expect_contains(input_error_of([&] {
                    model->forward(torch::zeros({2, 4}, torch::kInt));
                  }),
                  {"int64"});
}

}  // namespace
}  // namespace bigbatch::models
