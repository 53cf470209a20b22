// The Unigram model on small tokenizer.json files written here, with the ids Python's tokenizers
// 0.23.3 gives for the same files: the segmentation with the best score (a tie keeps the path
// found first), unknown characters fused into one unknown id, byte fallback, and every refusal
// named. The golden ids of a real
// pipeline (xlmr-unigram) are in golden_test.cpp.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"
#include "bigbatch/text/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using Pieces = std::vector<std::pair<std::string, double>>;

/// A Unigram's vocab: [[piece, score], ...].
Json vocab_of(const Pieces& pieces) {
  Json vocab = Json::array();
  for (const auto& [piece, score] : pieces)
    vocab.push_back(Json::array({piece, score}));
  return vocab;
}

/// A tokenizer.json of a Unigram model over `vocab` and nothing else, loaded.
std::shared_ptr<const bigbatch::text::Tokenizer> unigram(const Json& vocab, const Json& unk_id,
                                                         bool byte_fallback = false) {
  const fs::path dir =
      fs::temp_directory_path() / ("bigbatch-unigram-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  const Json tokenizer = {{"version", "1.0"},
                          {"truncation", nullptr},
                          {"padding", nullptr},
                          {"added_tokens", Json::array()},
                          {"normalizer", nullptr},
                          {"pre_tokenizer", nullptr},
                          {"post_processor", nullptr},
                          {"decoder", nullptr},
                          {"model",
                           {{"type", "Unigram"},
                            {"unk_id", unk_id},
                            {"vocab", vocab},
                            {"byte_fallback", byte_fallback}}}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  auto loaded = bigbatch::text::load_tokenizer(dir.string());
  fs::remove_all(dir);
  return loaded;
}

std::string load_error(const Json& vocab, const Json& unk_id) {
  try {
    unigram(vocab, unk_id);
  } catch (const bigbatch::InputError& e) {
    return e.what();
  }
  return "";
}

using Ids = std::vector<int64_t>;

TEST(Unigram, TheSegmentationOfTheHighestScoreWins) {
  const Json vocab = vocab_of(
      {{"<unk>", 0.0}, {"a", -1.0}, {"b", -2.0}, {"ab", -2.5}, {"abc", -9.0}, {"c", -1.0}});
  const auto tokenizer = unigram(vocab, 0);
  EXPECT_EQ(tokenizer->encode("ab", false), (Ids{3}));      // -2.5 beats a + b = -3
  EXPECT_EQ(tokenizer->encode("abc", false), (Ids{3, 5}));  // -3.5 beats abc = -9
  EXPECT_EQ(tokenizer->encode("ba", false), (Ids{2, 1}));
  EXPECT_EQ(tokenizer->encode("", false), (Ids{}));
  // A tie: a + b = -3 = ab; the path found first, whose last piece starts earlier, stays.
  const Json tied = vocab_of({{"<unk>", 0.0}, {"a", -1.0}, {"b", -2.0}, {"ab", -3.0}});
  EXPECT_EQ(unigram(tied, 0)->encode("ab", false), (Ids{3}));
}

TEST(Unigram, UnknownCharactersAreFusedIntoOneUnknownId) {
  const Json vocab = vocab_of({{"<unk>", 0.0}, {"a", -1.0}, {"é", -1.0}});
  const auto tokenizer = unigram(vocab, 0);
  EXPECT_EQ(tokenizer->encode("axyzé", false), (Ids{1, 0, 2}));
  EXPECT_EQ(tokenizer->encode("xaz", false), (Ids{0, 1, 0}));
  EXPECT_EQ(tokenizer->decode({1, 2}, false), "a é");  // no decoder: tokens joined by spaces
}

TEST(Unigram, ByteFallbackSpellsUnknownPiecesInBytes) {
  const Json vocab =
      vocab_of({{"<unk>", 0.0}, {"a", -1.0}, {"<0x63>", -5.0}, {"<0xC3>", -5.0}, {"<0xA9>", -5.0}});
  const auto tokenizer = unigram(vocab, 0, /*byte_fallback=*/true);
  EXPECT_EQ(tokenizer->encode("ac", false), (Ids{1, 2}));
  EXPECT_EQ(tokenizer->encode("é", false), (Ids{3, 4}));
  EXPECT_EQ(tokenizer->encode("ad", false), (Ids{1, 0}));  // no <0x64>: unknown
}

TEST(Unigram, BadModelsAreRefused) {
  EXPECT_NE(load_error(vocab_of({{"a", -1.0}, {"a", -2.0}}), nullptr)
                .find("(model.vocab[1]): piece \"a\" is listed twice"),
            std::string::npos);
  EXPECT_NE(load_error(Json::array({Json::array({"a", -1.0}), Json::array({"b"})}), nullptr)
                .find("(model.vocab[1]): expected [piece, score], got [\"b\"]"),
            std::string::npos);
  EXPECT_NE(
      load_error(vocab_of({{"a", -1.0}}), 4).find("(model.unk_id): 4 is not an id of the 1 pieces"),
      std::string::npos);
  const auto no_unk = unigram(vocab_of({{"a", -1.0}}), nullptr);
  EXPECT_EQ(no_unk->encode("aa", false), (Ids{0, 0}));
  try {
    no_unk->encode("ab", false);
    ADD_FAILURE() << "expected an InputError";
  } catch (const bigbatch::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "Unigram: \"b\" has no piece and the model has no unk_id to stand for it"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
