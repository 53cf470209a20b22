// Chat conversations to token ids for instruction tuning: rendered with the tokenizer's chat
// template as transformers' apply_chat_template renders them, with the assistant turns marked.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/text/chat_template.h"
#include "bigbatch/text/tokenizer.h"

namespace bigbatch::text {

/// A tokenized conversation.
struct ConversationTokens {
  /// The ids of the rendered conversation, as apply_chat_template(messages, tokenize=True) gives
  /// them: the whole text encoded once, without the tokenizer's own special tokens (the template
  /// writes BOS where the model wants it).
  std::vector<int64_t> ids;
  /// 1 for the tokens of the assistant turns, as ids is long. A turn runs from the end of the
  /// generation prompt before it (`add_generation_prompt=True` over the messages before it) to
  /// the end of the turn as the template renders it, end-of-turn markup included: what the model
  /// generates when it answers.
  std::vector<uint8_t> assistant;
  /// Turn boundaries that fall inside a token (the text on both sides merged into one token):
  /// such a token counts as the assistant's at a turn's start and not at its end.
  int64_t split_tokens = 0;
};

/// How to render: the template, and the tokenizer whose special tokens it is given.
struct ConversationRenderer {
  /// The tokenizer's chat template, and the variables transformers gives it besides messages
  /// and tools: bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token
  /// (those the tokenizer has). `origin` names the template in errors.
  ConversationRenderer(const Tokenizer& tokenizer, const std::string& chat_template,
                       const std::string& origin);

  /// The text of `messages` (a JSON array of {"role", "content", ...}) with `tools` (null or an
  /// array), as apply_chat_template(messages, tools=tools, add_generation_prompt=...,
  /// tokenize=False) renders it.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt) const;

  /// The tokens of the conversation and which are the assistant's. Throws InputError when the
  /// template renders the conversation so that a shorter one is not its beginning (for example
  /// a template that rewrites earlier turns), since then no turn's tokens can be told apart.
  ConversationTokens tokenize(const nlohmann::ordered_json& messages,
                              const nlohmann::ordered_json& tools) const;

 private:
  const Tokenizer& tokenizer_;
  ChatTemplate template_;
  nlohmann::ordered_json variables_;  ///< the special tokens
  std::string origin_;
};

}  // namespace bigbatch::text
