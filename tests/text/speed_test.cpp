// Encoding speed on the English fortunes (Debian's `fortunes`): the MiniLM tokenizer (WordPiece),
// the GPT-2 fixture (byte-level BPE) and the XLM-RoBERTa fixture (Precompiled + Unigram), printed in MB/s for docs/TOKENIZERS.md. It checks only
// that every text encodes; the numbers are read from the log:
//   build-text/tests/bigbatch_text_tests --gtest_filter='TokenizerSpeed.*'
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bigbatch/core/check.h"
#include "bigbatch/text/tokenizer.h"

namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tokenizers";

/// The fortunes of every English collection (files without an extension), one per string.
std::vector<std::string> fortunes() {
  std::vector<std::string> texts;
  for (const auto& entry : fs::directory_iterator("/usr/share/games/fortunes")) {
    if (!entry.is_regular_file() || entry.path().has_extension())
      continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string line, text;
    while (std::getline(in, line)) {
      if (line == "%") {
        texts.push_back(text);
        text.clear();
      } else {
        text += line + "\n";
      }
    }
  }
  return texts;
}

void measure(const std::string& name) {
  const auto texts = fortunes();
  ASSERT_GT(texts.size(), 1000u) << "the fortunes package is missing";
  const auto tokenizer = bigbatch::text::load_tokenizer(kFixtures + "/" + name);
  std::size_t bytes = 0, ids = 0, skipped = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& text : texts) {
    try {
      ids += tokenizer->encode(text).size();
      bytes += text.size();
    } catch (const bigbatch::InputError&) {
      ++skipped;  // a few fortunes are Latin-1, not UTF-8
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(skipped, texts.size() / 100);
  std::cout << name << ": " << texts.size() - skipped << " fortunes, " << bytes << " bytes -> "
            << ids << " ids in " << seconds << " s: " << bytes / seconds / 1e6 << " MB/s\n";
}

TEST(TokenizerSpeed, MiniLmOnFortunes) {
  measure("minilm-l6-v2");
}

TEST(TokenizerSpeed, Gpt2FixtureOnFortunes) {
  measure("gpt2-bpe");
}

TEST(TokenizerSpeed, XlmrUnigramFixtureOnFortunes) {
  measure("xlmr-unigram");
}

}  // namespace
