#include "bigbatch/models/bert.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/models/model_info.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using bigbatch::testing::input_error_of;
using torch::indexing::Slice;

constexpr int64_t kPad = 256;

/// A small model with several heads and blocks.
BertOptions small_options() {
  return BertOptions().context(24).layers(2).heads(4).embed(32).classes(3);
}

/// Random bytes (batch, time) with `lengths[b]` real tokens in row b and pads after them.
torch::Tensor padded_bytes(const std::vector<int64_t>& lengths, int64_t time) {
  torch::Tensor tokens = torch::randint(256, {int64_t(lengths.size()), time}, torch::kLong);
  for (size_t b = 0; b < lengths.size(); ++b)
    tokens.index_put_({int64_t(b), Slice(lengths[b], torch::indexing::None)}, kPad);
  return tokens;
}

/// Expects `message` to contain every one of `parts`.
void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

TEST(Bert, ForwardGivesOneRowOfLogitsPerSequence) {
  torch::manual_seed(0);
  Bert model(small_options());
  for (const int64_t time : {1, 7, 24}) {
    const torch::Tensor logits = model->forward(padded_bytes({time, 1, time / 2}, time));
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 3}));
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  }
}

TEST(Bert, NamesAndParameterCount) {
  Bert model(small_options().layers(1));
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters())
    names.push_back(item.key());
  const std::vector<std::string> expected = {"cls",
                                             "tok_embed.weight",
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
                                             "head.weight",
                                             "head.bias"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(model->named_parameters()["pos_embed.weight"].sizes(), (std::vector<int64_t>{25, 32}));
  // Defaults: C = 128, V = 257, T = 256, L = 2, 2 classes. Per block 12*C*C + 13*C = 198272;
  // cls C, tokens V*C, positions (T+1)*C, ln_f 2C, head 2C + 2.
  const int64_t c = 128;
  const int64_t block = 12 * c * c + 13 * c;
  EXPECT_EQ(block, 198272);
  Bert defaults;
  EXPECT_EQ(parameter_count(*defaults), c + 257 * c + 257 * c + 2 * block + 2 * c + 2 * c + 2);
  EXPECT_EQ(parameter_count(*defaults), 462978);
}

TEST(Bert, FullyPaddedRowIsFinite) {
  torch::manual_seed(1);
  Bert model(small_options());
  const torch::Tensor inputs = padded_bytes({0, 5, 0}, 8);  // rows 0 and 2: only pads
  for (const bool training : {true, false}) {
    model->train(training);
    model->zero_grad();
    const torch::Tensor logits = model->forward(inputs);  // (B, classes)
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>()) << logits;
    if (training) {
      logits.sum().backward();
      for (const auto& item : model->named_parameters()) {
        if (item.value().grad().defined()) {
          EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
        }
      }
    }
  }
  model->eval();
  EXPECT_TRUE(torch::allclose(model->forward(inputs)[0], model->forward(inputs)[2]));
}

TEST(Bert, LogitsDoNotDependOnTrailingPadding) {
  torch::manual_seed(2);
  Bert model(small_options());
  model->eval();
  const torch::Tensor short_rows = padded_bytes({5, 3, 8, 1}, 8);  // (4, 8)
  torch::Tensor long_rows = torch::full({4, 24}, kPad, torch::kLong);
  long_rows.index_put_({Slice(), Slice(0, 8)}, short_rows);  // the same rows, 16 more pads
  const torch::Tensor a = model->forward(short_rows);
  const torch::Tensor b = model->forward(long_rows);
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5) << a << b;
  // One row alone gives the same as inside a batch of other lengths.
  const torch::Tensor alone = model->forward(short_rows.narrow(0, 1, 1).narrow(1, 0, 3));
  EXPECT_LT((alone[0] - a[1]).abs().max().item<double>(), 1e-5);
  // Sanity: a real token after the sequence does change the logits.
  torch::Tensor extended = short_rows.clone();
  extended.index_put_({1, 3}, 65);
  EXPECT_GT((model->forward(extended)[1] - a[1]).abs().max().item<double>(), 1e-4);
}

TEST(Bert, AttentionIsBidirectional) {
  torch::manual_seed(3);
  Bert model(small_options());
  model->eval();
  const torch::Tensor inputs = padded_bytes({8}, 8);
  torch::Tensor changed = inputs.clone();
  changed.index_put_({0, 7}, (inputs.index({0, 7}) + 1) % 256);
  EXPECT_FALSE(torch::equal(model->forward(inputs), model->forward(changed)));
}

TEST(Bert, DropoutActsOnlyInTrainMode) {
  torch::manual_seed(4);
  Bert model(small_options().dropout(0.2));
  const torch::Tensor inputs = padded_bytes({8, 4}, 8);
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(inputs), model->forward(inputs)));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(inputs), model->forward(inputs)));
}

TEST(Bert, LossFallsOnATinyTask) {
  // 32 fixed sequences of 12 bytes with 0-4 pads at the end; the class is the group of bytes
  // the tokens are drawn from: {0..3}, {64..67} or {128..131}.
  torch::manual_seed(5);
  const torch::Tensor labels = torch::arange(32, torch::kLong) % 3;  // (32)
  torch::Tensor inputs = torch::randint(4, {32, 12}, torch::kLong) + 64 * labels.unsqueeze(1);
  for (int64_t b = 0; b < 32; ++b)
    inputs.index_put_({b, Slice(12 - b % 5, torch::indexing::None)}, kPad);
  Bert model(small_options());
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step) {
    optimizer.zero_grad();
    const torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(inputs), labels);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "losses " << torch::tensor(losses);
}

TEST(Bert, InvalidOptionsAndInputsNameFieldAndValue) {
  expect_contains(input_error_of([] { Bert(BertOptions().pad_id(300)); }),
                  {"BertOptions.pad_id", "300", "257"});
  expect_contains(input_error_of([] { Bert(BertOptions().embed(130).heads(4)); }),
                  {"BertOptions.embed", "130", "BertOptions.heads", "4"});
  expect_contains(input_error_of([] { Bert(BertOptions().classes(0)); }),
                  {"BertOptions.classes", "0"});
  expect_contains(input_error_of([] { Bert(BertOptions().layers(-1)); }),
                  {"BertOptions.layers", "-1"});
  expect_contains(input_error_of([] { Bert(BertOptions().context(0)); }),
                  {"BertOptions.context", "0"});
  expect_contains(input_error_of([] { Bert(BertOptions().vocab(0)); }), {"BertOptions.vocab", "0"});
  expect_contains(input_error_of([] { Bert(BertOptions().dropout(1.0)); }),
                  {"BertOptions.dropout", "1"});
  Bert model(small_options());
  expect_contains(input_error_of([&] { model->forward(padded_bytes({25}, 25)); }),
                  {"T = 25", "context = 24"});
  expect_contains(input_error_of([&] {
                    model->forward(torch::full({2, 4}, 257, torch::kLong));
                  }),
                  {"257", "vocab"});
  expect_contains(input_error_of([&] { model->forward(torch::zeros({4}, torch::kLong)); }),
                  {"(B, T)", "[4]"});
  expect_contains(input_error_of([&] {
                    model->forward(torch::zeros({2, 4}, torch::kInt));
                  }),
                  {"int64"});
}

}  // namespace
}  // namespace bigbatch::models
