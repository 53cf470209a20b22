// The one error type of the Jinja interpreter: what went wrong, of which kind, and where in the
// template source. ChatTemplate turns it into an InputError naming the origin, line and column.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace bigbatch::text::jinja {

/// A byte offset in the (newline-normalized) template source that no node has claimed yet.
inline constexpr std::size_t kNoPosition = static_cast<std::size_t>(-1);

/// Kinds of errors, named as Python's jinja2 names the exceptions it raises.
enum class ErrorKind {
  kSyntax,        ///< TemplateSyntaxError: the source does not parse
  kUnsupported,   ///< a construct this interpreter refuses (a tag, a filter, a feature)
  kUndefined,     ///< UndefinedError: an undefined value was used
  kType,          ///< TypeError: an operation on values of the wrong type
  kValue,         ///< ValueError (and FilterArgumentError)
  kZeroDivision,  ///< ZeroDivisionError
  kOverflow,      ///< OverflowError, RecursionError
  kSecurity,      ///< SecurityError: what the sandbox forbids (list.append, _private names)
  kRaised,        ///< TemplateError raised by the template itself through raise_exception()
};

/// The Python name of `kind` ("TypeError", ...), for messages.
inline const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax:
      return "TemplateSyntaxError";
    case ErrorKind::kUnsupported:
      return "not supported";
    case ErrorKind::kUndefined:
      return "UndefinedError";
    case ErrorKind::kType:
      return "TypeError";
    case ErrorKind::kValue:
      return "ValueError";
    case ErrorKind::kZeroDivision:
      return "ZeroDivisionError";
    case ErrorKind::kOverflow:
      return "OverflowError";
    case ErrorKind::kSecurity:
      return "SecurityError";
    case ErrorKind::kRaised:
      return "raise_exception";
  }
  return "error";
}

/// An error while lexing, parsing or rendering a template.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::size_t position = kNoPosition)
      : std::runtime_error(message), kind_(kind), position_(position) {}
  ErrorKind kind() const { return kind_; }
  /// The byte offset of the construct that failed, or kNoPosition.
  std::size_t position() const { return position_; }
  /// Claims the error for the construct at `position` unless an inner one already has.
  void locate(std::size_t position) {
    if (position_ == kNoPosition)
      position_ = position;
  }

 private:
  ErrorKind kind_;
  std::size_t position_;
};

/// Throws Error(kind, message, position).
[[noreturn]] inline void fail(ErrorKind kind, const std::string& message,
                              std::size_t position = kNoPosition) {
  throw Error(kind, message, position);
}

}  // namespace bigbatch::text::jinja
