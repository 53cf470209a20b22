#include "bigbatch/data/token_datasets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using bigbatch::testing::input_error_of;
using ::testing::HasSubstr;

std::vector<int64_t> row(const torch::Tensor& t, int64_t i) {
  const torch::Tensor r = t[i].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

TEST(PackDocuments, SeparatorAfterEveryDocument) {
  EXPECT_EQ(pack_documents({{1, 2}, {3}, {}}, 0), (TokenIds{1, 2, 0, 3, 0, 0}));
}

TEST(PackedTokenDataset, BlocksShareOneTokenAndTheLastIsPadded) {
  auto tokens = std::make_shared<const TokenIds>(TokenIds{10, 11, 12, 13, 14, 15});
  const PackedTokenDataset data(tokens, TokenDatasetOptions(3).pad_id(7));
  ASSERT_EQ(data.size(), 2);
  const Batch batch = data.get({1, 0});
  EXPECT_EQ(row(batch.inputs, 0), (std::vector<int64_t>{13, 14, 7}));
  EXPECT_EQ(row(batch.targets, 0), (std::vector<int64_t>{14, 15, -100}));
  EXPECT_EQ(row(batch.inputs, 1), (std::vector<int64_t>{10, 11, 12}));
  EXPECT_EQ(row(batch.targets, 1), (std::vector<int64_t>{11, 12, 13}));
  EXPECT_EQ(data.describe(), "2 blocks of 3 tokens (6 tokens)");
  EXPECT_THAT(input_error_of([] {
                PackedTokenDataset(std::make_shared<const TokenIds>(TokenIds{1}),
                                   TokenDatasetOptions(3).name("val"));
              }),
              HasSubstr("val has 1 tokens; need at least 2"));
}

TEST(PromptThenResponse, LearnsTheResponseTokens) {
  const SupervisedTokens sample = prompt_then_response({1, 2}, {3, 4});
  EXPECT_EQ(sample.tokens, (TokenIds{1, 2, 3, 4}));
  EXPECT_EQ(sample.learned, (std::vector<uint8_t>{0, 0, 1, 1}));
}

TEST(SupervisedTokenDataset, OnlyResponseTokensAreTargets) {
  std::vector<SupervisedTokens> samples = {
      prompt_then_response({1, 2, 3}, {4, 5, 9}),  // 6 tokens: inputs 5
      prompt_then_response({1}, {6, 9}),           // 3 tokens: inputs 2, padded
  };
  const SupervisedTokenDataset data(samples, TokenDatasetOptions(8).pad_id(0));
  const Batch batch = data.get({0, 1});
  ASSERT_EQ(batch.inputs.sizes(), (torch::IntArrayRef{2, 5}));
  EXPECT_EQ(row(batch.inputs, 0), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(row(batch.targets, 0), (std::vector<int64_t>{-100, -100, 4, 5, 9}));
  EXPECT_EQ(row(batch.inputs, 1), (std::vector<int64_t>{1, 6, 0, 0, 0}));
  EXPECT_EQ(row(batch.targets, 1), (std::vector<int64_t>{6, 9, -100, -100, -100}));
  // The loss counts exactly the 5 response tokens.
  EXPECT_EQ(batch.targets.ne(-100).sum().item<int64_t>(), 5);
  EXPECT_THAT(data.describe(), HasSubstr("2 samples, up to 5 tokens (5 response tokens)"));
}

TEST(SupervisedTokenDataset, EveryLearnedSpanOfAConversationIsATarget) {
  // user 1 2, assistant 3 4, user 5, assistant 6 7: two learned spans.
  const SupervisedTokenDataset data({{{1, 2, 3, 4, 5, 6, 7}, {0, 0, 1, 1, 0, 1, 1}}},
                                    TokenDatasetOptions(16));
  const Batch batch = data.get({0});
  EXPECT_EQ(row(batch.inputs, 0), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(row(batch.targets, 0), (std::vector<int64_t>{-100, 3, 4, -100, 6, 7}));
  EXPECT_THAT(data.describe(), HasSubstr("(4 response tokens)"));
  EXPECT_THROW(SupervisedTokenDataset({{{1, 2}, {0}}}, TokenDatasetOptions(4)), std::logic_error);
}

TEST(SupervisedTokenDataset, LongSamplesAreCutAndPromptsFillingTheContextDropped) {
  std::vector<SupervisedTokens> samples = {
      prompt_then_response({1, 2}, {3, 4, 5, 6, 9}),  // cut to 4 + 1 tokens: responses 3, 4, 5
      prompt_then_response({1, 2, 3, 4, 5}, {6}),     // prompt fills context + 1: dropped
      prompt_then_response({1}, {}),                  // no response: dropped
      {{7, 8}, {1, 0}},                               // only token 0 learned: no target
  };
  const SupervisedTokenDataset data(samples, TokenDatasetOptions(4));
  EXPECT_EQ(data.size(), 1);
  EXPECT_EQ(data.dropped(), 3);
  const Batch batch = data.get({0});
  EXPECT_EQ(row(batch.inputs, 0), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(row(batch.targets, 0), (std::vector<int64_t>{-100, 3, 4, 5}));
  EXPECT_THAT(data.describe(), HasSubstr("3 dropped: no response token within the context"));
  EXPECT_THAT(input_error_of([] {
                SupervisedTokenDataset({prompt_then_response({1, 2, 3}, {4})},
                                       TokenDatasetOptions(2).name("train"));
              }),
              HasSubstr("train: none of the 1 samples keeps a response token"));
}

TEST(TokenClassificationDataset, PaddedToTheLongestWithClassTargets) {
  const TokenClassificationDataset data({{101, 5, 102}, {101, 102}}, {1, 0}, {"a", "b"},
                                        TokenDatasetOptions(8).pad_id(0));
  EXPECT_EQ(data.length(), 3);
  const Batch batch = data.get({1, 0});
  EXPECT_EQ(row(batch.inputs, 0), (std::vector<int64_t>{101, 102, 0}));
  EXPECT_EQ(row(batch.inputs, 1), (std::vector<int64_t>{101, 5, 102}));
  EXPECT_EQ(batch.targets[0].item<int64_t>(), 0);
  EXPECT_EQ(batch.targets[1].item<int64_t>(), 1);
  EXPECT_EQ(data.describe(), "2 texts of up to 3 tokens, 2 classes");
  EXPECT_THAT(input_error_of([] {
                TokenClassificationDataset({{1, 2, 3}}, {0}, {"a"}, TokenDatasetOptions(2));
              }),
              HasSubstr("sequence 0 has 3 tokens, outside [1, context = 2]"));
  EXPECT_THAT(input_error_of([] {
                TokenClassificationDataset({{1}}, {2}, {"a", "b"}, TokenDatasetOptions(2));
              }),
              HasSubstr("label 2 of sequence 0 is outside [0, 2)"));
}

TEST(TokenClassificationDataset, TheCostliestSamplesAreTheLongestTexts) {
  const TokenClassificationDataset data({{1, 2}, {1, 2, 3, 4}, {1}, {1, 2, 3, 4}, {1, 2, 3}},
                                        {0, 0, 0, 0, 0}, {"a"}, TokenDatasetOptions(8));
  EXPECT_EQ(data.costliest_samples(3), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(data.costliest_samples(9), (std::vector<int64_t>{1, 3, 4, 0, 2}));
  // A dataset of samples that all cost the same gives its first ones.
  const PackedTokenDataset same(std::make_shared<const TokenIds>(TokenIds{1, 2, 3, 4, 5, 6, 7}),
                                TokenDatasetOptions(2));
  EXPECT_EQ(same.costliest_samples(2), (std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace bigbatch::data
