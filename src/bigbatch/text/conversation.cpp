#include "bigbatch/text/conversation.h"

#include <algorithm>
#include <utility>

#include "bigbatch/core/check.h"

namespace bigbatch::text {

namespace {

/// The number of leading ids that `prefix` and `whole` share.
size_t common_prefix(const std::vector<int64_t>& prefix, const std::vector<int64_t>& whole) {
  const size_t n = std::min(prefix.size(), whole.size());
  return static_cast<size_t>(
      std::mismatch(prefix.begin(), prefix.begin() + n, whole.begin()).first - prefix.begin());
}

/// The first `count` messages.
nlohmann::ordered_json first_messages(const nlohmann::ordered_json& messages, size_t count) {
  nlohmann::ordered_json head = nlohmann::ordered_json::array();
  for (size_t i = 0; i < count; ++i)
    head.push_back(messages[i]);
  return head;
}

}  // namespace

ConversationRenderer::ConversationRenderer(const Tokenizer& tokenizer,
                                           const std::string& chat_template,
                                           const std::string& origin)
    : tokenizer_(tokenizer), template_(chat_template, origin), origin_(origin) {
  const SpecialTokens& special = tokenizer.special_tokens();
  const std::pair<const char*, std::optional<int64_t>> named[] = {
      {"bos_token", special.bos},  {"eos_token", special.eos}, {"unk_token", special.unk},
      {"sep_token", special.sep},  {"pad_token", special.pad}, {"cls_token", special.cls},
      {"mask_token", special.mask}};
  variables_ = nlohmann::ordered_json::object();
  for (const auto& [name, id] : named) {
    if (id)
      variables_[name] = tokenizer.id_to_token(*id);
  }
}

std::string ConversationRenderer::render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         bool add_generation_prompt) const {
  nlohmann::ordered_json variables = variables_;
  variables["messages"] = messages;
  variables["tools"] = tools;  // None when absent, as transformers passes it
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = add_generation_prompt;
  return template_.render(variables);
}

ConversationTokens ConversationRenderer::tokenize(const nlohmann::ordered_json& messages,
                                                  const nlohmann::ordered_json& tools) const {
  const std::string whole = render(messages, tools, false);
  ConversationTokens out;
  out.ids = tokenizer_.encode(whole, /*add_special_tokens=*/false);
  out.assistant.assign(out.ids.size(), 0);
  // A boundary as a token index: the tokens of whole[0, end) that the whole text shares.
  const auto token_boundary = [&](const std::string& head, size_t message) {
    BB_CHECK_INPUT(whole.compare(0, head.size(), head) == 0, origin_,
                   ": the conversation rendered up to message ", message,
                   " is not the beginning of the whole conversation rendered, so its assistant "
                   "turns cannot be told apart (the template rewrites earlier turns); give "
                   "{\"prompt\", \"response\"} records instead");
    const std::vector<int64_t> ids = tokenizer_.encode(head, false);
    const size_t shared = common_prefix(ids, out.ids);
    out.split_tokens += shared < ids.size() ? 1 : 0;
    return shared;
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant")
      continue;
    const size_t begin = token_boundary(render(first_messages(messages, i), tools, true), i);
    const size_t end = token_boundary(render(first_messages(messages, i + 1), tools, false), i + 1);
    std::fill(out.assistant.begin() + static_cast<std::ptrdiff_t>(begin),
              out.assistant.begin() + static_cast<std::ptrdiff_t>(std::max(begin, end)), 1);
  }
  return out;
}

}  // namespace bigbatch::text
