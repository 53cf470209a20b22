// Every fixture tokenizer (tests/hf/tokenizers/) on every text of golden.json: the ids with and
// without special tokens and the decoded texts must equal what Hugging Face gave
// (tests/text/make_tokenizer_fixtures.py).
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bigbatch/text/tokenizer.h"

namespace {

const std::string kFixtures = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tokenizers";

const nlohmann::json& golden() {
  static const nlohmann::json g = [] {
    std::ifstream in(kFixtures + "/golden.json");
    EXPECT_TRUE(in) << kFixtures << "/golden.json is missing";
    return nlohmann::json::parse(in);
  }();
  return g;
}

/// A readable form of a text for failure messages.
std::string shown(const std::string& text) {
  return nlohmann::json(text).dump();
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, IdsAndDecodeEqualHuggingFace) {
  const std::string name = GetParam();
  ASSERT_TRUE(golden()["fixtures"].contains(name)) << name << " is not in golden.json";
  const nlohmann::json& entry = golden()["fixtures"][name];
  const auto tokenizer = bigbatch::text::load_tokenizer(kFixtures + "/" + name);
  EXPECT_EQ(tokenizer->vocab_size(), entry["vocab_size"].get<int64_t>());
  ASSERT_GE(entry["texts"].size(), 10u);
  for (const nlohmann::json& row : entry["texts"]) {
    const std::string text = row["text"];
    const auto ids = row["ids"].get<std::vector<int64_t>>();
    const auto ids_no_special = row["ids_no_special"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer->encode(text, true), ids) << name << " on " << shown(text);
    EXPECT_EQ(tokenizer->encode(text, false), ids_no_special) << name << " on " << shown(text);
    EXPECT_EQ(tokenizer->decode(ids, true), row["decoded"].get<std::string>())
        << name << " on " << shown(text);
    EXPECT_EQ(tokenizer->decode(ids, false), row["decoded_keep_special"].get<std::string>())
        << name << " on " << shown(text);
    EXPECT_EQ(tokenizer->decode(ids_no_special, false),
              row["decoded_no_special"].get<std::string>())
        << name << " on " << shown(text);
  }
  if (entry.contains("pair")) {
    const nlohmann::json& pair = entry["pair"];
    EXPECT_EQ(tokenizer->encode_pair(pair["first"], pair["second"]),
              pair["ids"].get<std::vector<int64_t>>())
        << name;
  }
}

TEST_P(GoldenTest, TokensAndIdsRoundTrip) {
  const auto tokenizer = bigbatch::text::load_tokenizer(kFixtures + "/" + GetParam());
  for (int64_t id = 0; id < tokenizer->vocab_size(); ++id) {
    const std::string token = tokenizer->id_to_token(id);
    EXPECT_EQ(tokenizer->token_to_id(token), id) << GetParam() << " token " << shown(token);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest,
                         ::testing::Values("minilm-l6-v2", "bert-wordpiece", "bert-cased-wordpiece",
                                           "gpt2-bpe", "llama3-bpe", "qwen2-bpe",
                                           "llama2-bpe-fallback", "llama2-metaspace",
                                           "llama2-sentencepiece", "gemma-bpe", "roberta-bpe",
                                           "xlmr-unigram", "modernbert-bpe"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name)
                             if (c == '-')
                               c = '_';
                           return name;
                         });

TEST(GoldenFile, EveryFixtureIsTested) {
  // A fixture added to golden.json without a test instance would be skipped silently.
  EXPECT_EQ(golden()["fixtures"].size(), 13u);
}

}  // namespace
