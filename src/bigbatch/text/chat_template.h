// Chat templates of Hugging Face tokenizers (tokenizer_config.json's "chat_template"): a Jinja2
// interpreter that renders them as transformers' apply_chat_template does, with jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols) and
// transformers' globals (raise_exception, strftime_now) and tojson. See docs/TOKENIZERS.md.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>

namespace bigbatch::text {

/// A Jinja2 chat template (tokenizer_config.json's "chat_template"), parsed once, rendered per
/// conversation.
class ChatTemplate {
 public:
  /// Parses `source`. Throws bigbatch::InputError naming `origin` (e.g.
  /// "DIR/tokenizer_config.json chat_template"), the line and column, and what was expected,
  /// for a syntax error or a construct this interpreter does not support (named: "the 'extends'
  /// tag is not supported").
  explicit ChatTemplate(std::string source, std::string origin = "chat template");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  /// Renders with `variables` (a JSON object: messages, add_generation_prompt, bos_token,
  /// eos_token, tools, ...) as the template's globals. Throws InputError naming the origin, line
  /// and column for an error while rendering, including the template's own
  /// raise_exception("..."), whose message it carries verbatim.
  ///
  /// nlohmann::json keeps object keys sorted, so the template iterates dicts (and tojson writes
  /// them) in sorted key order; pass an nlohmann::ordered_json to keep the order of the source,
  /// as Python's dicts do.
  std::string render(const nlohmann::json& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;

  /// What errors name the template by.
  const std::string& origin() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bigbatch::text
