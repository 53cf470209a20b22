// Chat conversations to ids (text::ConversationRenderer): the ids and assistant masks equal
// transformers' apply_chat_template (tests/text/make_conversation_golden.py), and the templates
// it cannot split into turns are refused by name.
#include "bigbatch/text/conversation.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"

namespace {

using bigbatch::InputError;
using bigbatch::text::ConversationRenderer;
using bigbatch::text::ConversationTokens;
using bigbatch::text::load_tokenizer;
using ::testing::HasSubstr;

const std::string kTests = BIGBATCH_TEST_DATA_DIR;
const std::string kTemplates = kTests + "/text/conversations/";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path << " is missing";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g =
      nlohmann::ordered_json::parse(read_text(kTemplates + "golden.json"));
  return g;
}

nlohmann::ordered_json conversation(
    std::initializer_list<std::pair<const char*, const char*>> turns) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const auto& [role, content] : turns)
    messages.push_back({{"role", role}, {"content", content}});
  return messages;
}

/// The message of the InputError `f` throws ("" if none).
template <typename F>
std::string input_error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ConversationRenderer, IdsAndAssistantTokensEqualTransformers) {
  const nlohmann::ordered_json& cases = golden()["cases"];
  ASSERT_EQ(cases.size(), 8u);
  for (const nlohmann::ordered_json& c : cases) {
    const std::string name =
        c["template"].get<std::string>() + " on " + c["tokenizer"].get<std::string>();
    const auto tokenizer = load_tokenizer(kTests + "/" + c["tokenizer"].get<std::string>());
    const ConversationRenderer renderer(
        *tokenizer, read_text(kTemplates + c["template"].get<std::string>() + ".jinja"), name);
    EXPECT_EQ(renderer.render(c["messages"], nullptr, false), c["text"].get<std::string>()) << name;
    const nlohmann::ordered_json first = nlohmann::ordered_json::array({c["messages"][0]});
    EXPECT_EQ(renderer.render(first, nullptr, true), c["generation_prompt_text"].get<std::string>())
        << name;
    const ConversationTokens tokens = renderer.tokenize(c["messages"], nullptr);
    EXPECT_EQ(tokens.ids, c["ids"].get<std::vector<int64_t>>()) << name;
    const std::vector<int> mask = c["assistant_mask"].get<std::vector<int>>();
    EXPECT_EQ(std::vector<int>(tokens.assistant.begin(), tokens.assistant.end()), mask) << name;
    EXPECT_EQ(tokens.split_tokens, 0) << name;
  }
}

TEST(ConversationRenderer, SpecialTokensAndToolsReachTheTemplate) {
  const auto tokenizer = load_tokenizer(kTests + "/hf/tiny-qwen2");
  const ConversationRenderer renderer(
      *tokenizer,
      "{{ eos_token }}|{{ pad_token }}|{{ bos_token is defined }}|{{ tools is none }}|"
      "{% if tools %}{{ tools[0].name }}{% endif %}|{{ messages | length }}",
      "test template");
  const nlohmann::ordered_json messages = conversation({{"user", "hi"}});
  EXPECT_EQ(renderer.render(messages, nullptr, false), "<|endoftext|>|<|endoftext|>|False|True||1");
  EXPECT_EQ(
      renderer.render(messages, nlohmann::ordered_json::parse(R"([{"name": "weather"}])"), false),
      "<|endoftext|>|<|endoftext|>|False|False|weather|1");
}

TEST(ConversationRenderer, ATemplateThatRewritesEarlierTurnsIsRefused) {
  const auto tokenizer = load_tokenizer(kTests + "/hf/tiny-qwen2");
  // Only the last message keeps its content, as templates that drop earlier reasoning do.
  const ConversationRenderer renderer(
      *tokenizer,
      "{% for m in messages %}<|im_start|>{{ m.role }}\n"
      "{% if loop.last %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}",
      "DIR/tokenizer_config.json chat_template");
  const nlohmann::ordered_json messages = conversation({{"user", "a"}, {"assistant", "b"}});
  EXPECT_THAT(input_error_of([&] { renderer.tokenize(messages, nullptr); }),
              HasSubstr("DIR/tokenizer_config.json chat_template: the conversation rendered up "
                        "to message 1 is not the beginning of the whole conversation"));
}

TEST(ConversationRenderer, TheTemplatesOwnExceptionNamesTheTemplate) {
  const auto tokenizer = load_tokenizer(kTests + "/hf/tokenizers/llama2-bpe-fallback");
  const ConversationRenderer renderer(*tokenizer, read_text(kTemplates + "llama2.jinja"),
                                      "llama2 template");
  const nlohmann::ordered_json messages = conversation({{"assistant", "a"}, {"user", "b"}});
  const std::string error = input_error_of([&] { renderer.tokenize(messages, nullptr); });
  EXPECT_THAT(error, HasSubstr("llama2 template"));
  EXPECT_THAT(error, HasSubstr("Conversation roles must alternate user/assistant/user/assistant"));
}

TEST(ConversationRenderer, ABoundaryInsideATokenIsCounted) {
  const auto tokenizer = load_tokenizer(kTests + "/hf/tokenizers/gpt2-bpe");
  // No markup between the turns: the user's "Say th" and the assistant's "at" render as
  // "Say that", where " that" is one token.
  const ConversationRenderer renderer(
      *tokenizer, "{% for m in messages %}{{ m.content }}{% endfor %}", "bare template");
  const nlohmann::ordered_json messages = conversation({{"user", "Say th"}, {"assistant", "at"}});
  const ConversationTokens tokens = renderer.tokenize(messages, nullptr);
  EXPECT_EQ(tokens.ids, tokenizer->encode("Say that", false));
  EXPECT_EQ(tokens.split_tokens, 1);
  // The token that holds the boundary counts as the assistant's: it is what the model generates.
  ASSERT_EQ(tokens.assistant.size(), 3u);  // S, ay, " that"
  EXPECT_EQ(tokens.assistant, (std::vector<uint8_t>{0, 0, 1}));
}

}  // namespace
