#include "bigbatch/text/chat_template.h"

#include <nlohmann/json.hpp>

#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_json.h"
#include "bigbatch/text/jinja_lexer.h"
#include "bigbatch/text/jinja_parser.h"
#include "bigbatch/text/jinja_render.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

struct ChatTemplate::Impl {
  std::string origin;
  jinja::Program program;

  /// The InputError for `e`: "ORIGIN, line L, column C: KIND: message".
  InputError input_error(const jinja::Error& e) const {
    std::string where = origin;
    if (e.position() != jinja::kNoPosition) {
      const jinja::Location at = jinja::locate(program.source, e.position());
      where += cat(", line ", at.line, ", column ", at.column);
    }
    std::string kind;
    switch (e.kind()) {
      case jinja::ErrorKind::kSyntax:
        kind = "syntax error: ";
        break;
      case jinja::ErrorKind::kUnsupported:
        break;
      default:
        kind = std::string(jinja::error_kind_name(e.kind())) + ": ";
    }
    return InputError(where + ": " + kind + e.what());
  }

  template <typename Json>
  std::string render(const Json& variables) const {
    BB_CHECK_INPUT(variables.is_object(), origin, ": the variables to render with must be a JSON ",
                   "object, not ", variables.type_name());
    try {
      const jinja::Value globals = jinja::from_json(variables);
      return jinja::render(program, globals.as_dict());
    } catch (const jinja::Error& e) {
      throw input_error(e);
    }
  }
};

ChatTemplate::ChatTemplate(std::string source, std::string origin)
    : impl_(std::make_unique<Impl>()) {
  impl_->origin = std::move(origin);
  BB_CHECK_INPUT(is_valid_utf8(source), impl_->origin, ": the template is not valid UTF-8");
  try {
    impl_->program = jinja::parse(source);
    jinja::fold_constants(impl_->program);
  } catch (const jinja::Error& e) {
    impl_->program.source = jinja::normalize_source(source);
    throw impl_->input_error(e);
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::json& variables) const {
  return impl_->render(variables);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  return impl_->render(variables);
}

const std::string& ChatTemplate::origin() const {
  return impl_->origin;
}

}  // namespace bigbatch::text
