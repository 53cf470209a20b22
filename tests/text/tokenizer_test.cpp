// The tokenizer API beyond the golden ids: special tokens, chat templates, descriptions, and
// every refusal with the file and the name that caused it.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"
#include "bigbatch/text/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using bigbatch::InputError;
using bigbatch::text::load_tokenizer;

const std::string kFixtures = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tokenizers";

/// A fresh, empty directory under the system's temporary directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("bigbatch-text-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
  }

 private:
  fs::path path_;
};

nlohmann::json fixture_json(const std::string& name) {
  std::ifstream in(kFixtures + "/" + name + "/tokenizer.json");
  return nlohmann::json::parse(in);
}

/// The message of the InputError `load_tokenizer(directory)` throws ("" if none).
std::string load_error(const std::string& directory) {
  try {
    load_tokenizer(directory);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

/// The load error of the GPT-2 fixture's tokenizer.json after `edit`.
template <typename Edit>
std::string edited_error(const TempDir& dir, Edit edit) {
  nlohmann::json j = fixture_json("gpt2-bpe");
  edit(j);
  dir.write("tokenizer.json", j.dump());
  return load_error(dir.str());
}

TEST(Tokenizer, SpecialTokensComeFromTheConfigFiles) {
  const auto bert = load_tokenizer(kFixtures + "/minilm-l6-v2");
  const auto& s = bert->special_tokens();
  EXPECT_EQ(s.pad, 0);
  EXPECT_EQ(s.unk, 100);
  EXPECT_EQ(s.cls, 101);
  EXPECT_EQ(s.sep, 102);
  EXPECT_EQ(s.mask, 103);
  EXPECT_FALSE(s.bos);
  EXPECT_FALSE(s.eos);
  const auto llama3 = load_tokenizer(kFixtures + "/llama3-bpe");
  EXPECT_EQ(llama3->special_tokens().bos, llama3->token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(llama3->special_tokens().eos, llama3->token_to_id("<|eot_id|>"));
  const auto sp = load_tokenizer(kFixtures + "/llama2-sentencepiece");
  EXPECT_EQ(sp->special_tokens().bos, 1);
  EXPECT_EQ(sp->special_tokens().eos, 2);
  EXPECT_EQ(sp->special_tokens().unk, 0);
  EXPECT_FALSE(sp->special_tokens().pad);
}

TEST(Tokenizer, DescriptionsNameTheModelAndFile) {
  EXPECT_EQ(load_tokenizer(kFixtures + "/minilm-l6-v2")->description(),
            "WordPiece, 30522 tokens (tokenizer.json)");
  EXPECT_EQ(load_tokenizer(kFixtures + "/qwen2-bpe")->description(),
            "BPE, 453 tokens (tokenizer.json)");
  EXPECT_EQ(load_tokenizer(kFixtures + "/llama2-sentencepiece")->description(),
            "SentencePiece, 500 tokens (tokenizer.model)");
}

TEST(Tokenizer, ChatTemplateIsReadFromTheConfig) {
  EXPECT_NE(bigbatch::text::chat_template(kFixtures + "/llama3-bpe").find("<|start_header_id|>"),
            std::string::npos);
  EXPECT_EQ(bigbatch::text::chat_template(kFixtures + "/minilm-l6-v2"), "");
  TempDir dir;
  dir.write("chat_template.jinja", "{{ messages }}");
  EXPECT_EQ(bigbatch::text::chat_template(dir.str()), "{{ messages }}");
}

TEST(Tokenizer, SentencePieceHonoursAddBosAndAddEos) {
  TempDir dir;
  fs::copy_file(kFixtures + "/llama2-sentencepiece/tokenizer.model",
                dir.str() + "/tokenizer.model");
  dir.write("tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true})");
  const auto sp = load_tokenizer(dir.str());
  const auto plain = sp->encode("Hello world", false);
  auto expected = plain;
  expected.push_back(2);
  EXPECT_EQ(sp->encode("Hello world", true), expected);
}

TEST(Tokenizer, OutOfRangeIdsAreRefused) {
  for (const char* name : {"minilm-l6-v2", "gpt2-bpe", "llama2-sentencepiece"}) {
    const auto t = load_tokenizer(kFixtures + "/" + name);
    const int64_t size = t->vocab_size();
    EXPECT_THROW(t->id_to_token(size), InputError) << name;
    EXPECT_THROW(t->id_to_token(-1), InputError) << name;
    EXPECT_THROW(t->decode({1, size}), InputError) << name;
  }
  const auto t = load_tokenizer(kFixtures + "/gpt2-bpe");
  try {
    t->id_to_token(421);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 421 is out of range"), std::string::npos)
        << e.what();
  }
}

TEST(Tokenizer, InvalidUtf8IsRefused) {
  const auto t = load_tokenizer(kFixtures + "/gpt2-bpe");
  EXPECT_THROW(t->encode("ab\xff"), InputError);
  EXPECT_THROW(load_tokenizer(kFixtures + "/llama2-sentencepiece")->encode("\xc3"), InputError);
}

TEST(TokenizerErrors, MissingDirectory) {
  EXPECT_NE(load_error("/nonexistent/model").find("/nonexistent/model: no such directory"),
            std::string::npos);
}

TEST(TokenizerErrors, NoTokenizerFile) {
  TempDir dir;
  dir.write("config.json", "{}");
  EXPECT_NE(load_error(dir.str()).find("no tokenizer (expected tokenizer.json, or a "
                                       "SentencePiece tokenizer.model)"),
            std::string::npos);
}

TEST(TokenizerErrors, CorruptJson) {
  TempDir dir;
  dir.write("tokenizer.json", "{\"model\": {");
  const std::string e = load_error(dir.str());
  EXPECT_NE(e.find("tokenizer.json: not valid JSON"), std::string::npos) << e;
}

TEST(TokenizerErrors, CorruptSentencePieceModel) {
  TempDir dir;
  dir.write("tokenizer.model", "not a protobuf");
  const std::string e = load_error(dir.str());
  EXPECT_NE(e.find("tokenizer.model: not a SentencePiece model"), std::string::npos) << e;
}

TEST(TokenizerErrors, UnknownModelTypeIsNamed) {
  TempDir dir;
  const std::string e =
      edited_error(dir, [](nlohmann::json& j) { j["model"]["type"] = "WordLevel"; });
  EXPECT_NE(e.find("(model): model type \"WordLevel\" is not supported (supported: BPE, "
                   "WordPiece, Unigram)"),
            std::string::npos)
      << e;
}

TEST(TokenizerErrors, UnknownComponentTypesAreNamedWithTheSupportedOnes) {
  TempDir dir;
  std::string e = edited_error(dir, [](nlohmann::json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {j["pre_tokenizer"], {{"type", "UnicodeScripts"}}}}};
  });
  EXPECT_NE(e.find("(pre_tokenizer.pretokenizers[1]): pre-tokenizer type \"UnicodeScripts\" is "
                   "not supported (supported: BertPreTokenizer, ByteLevel"),
            std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) { j["normalizer"] = {{"type", "Nmt"}}; });
  EXPECT_NE(e.find("normalizer type \"Nmt\" is not supported (supported: BertNormalizer"),
            std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) {
    j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "not base64!"}};
  });
  EXPECT_NE(e.find("(normalizer.precompiled_charsmap): expected base64 of a SentencePiece "
                   "charsmap"),
            std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) {
    j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "QAAAAAAA"}};
  });
  EXPECT_NE(e.find("(normalizer.precompiled_charsmap): the trie's size 64 does not fit the 6 "
                   "bytes of the charsmap"),
            std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) { j["decoder"] = {{"type", "CTC"}}; });
  EXPECT_NE(e.find("decoder type \"CTC\" is not supported"), std::string::npos) << e;
  e = edited_error(dir, [](nlohmann::json& j) { j["post_processor"] = {{"type", "Magic"}}; });
  EXPECT_NE(e.find("post-processor type \"Magic\" is not supported"), std::string::npos) << e;
}

TEST(TokenizerErrors, BadModelSettings) {
  TempDir dir;
  std::string e = edited_error(dir, [](nlohmann::json& j) { j["model"]["dropout"] = 0.1; });
  EXPECT_NE(e.find("(model.dropout): BPE dropout 0.1 is not supported"), std::string::npos) << e;
  e = edited_error(dir, [](nlohmann::json& j) { j["model"]["merges"][3] = "a b c"; });
  EXPECT_NE(e.find("(model.merges[3]): a merge must be two tokens separated by one space, got "
                   "\"a b c\""),
            std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) { j["model"]["merges"][0] = "zzz q"; });
  EXPECT_NE(e.find("(model.merges[0]): merge token \"zzz\" is not in the vocabulary"),
            std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) {
    j["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"Regex", "(unclosed"}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  });
  EXPECT_NE(e.find("the regular expression \"(unclosed\" does not compile"), std::string::npos)
      << e;
  e = edited_error(dir, [](nlohmann::json& j) { j.erase("model"); });
  EXPECT_NE(e.find("tokenizer.json: \"model\" is missing"), std::string::npos) << e;
}

}  // namespace
