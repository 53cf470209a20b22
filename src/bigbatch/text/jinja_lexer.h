// The Jinja lexer: template source to tokens, with jinja2's rules for whitespace control as
// transformers configures it (trim_blocks, lstrip_blocks, `-` and `+` modifiers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch::text::jinja {

enum class TokenKind {
  kData,           ///< template text, whitespace control already applied
  kVariableBegin,  ///< {{
  kVariableEnd,    ///< }}
  kBlockBegin,     ///< {%
  kBlockEnd,       ///< %}
  kName,
  kString,   ///< a string literal, unescaped
  kInteger,  ///< an integer literal
  kFloat,    ///< a float literal
  kOperator,
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;  ///< data, name, string value, or operator symbol
  int64_t integer = 0;
  double number = 0;
  std::size_t position = 0;  ///< byte offset in the normalized source
};

/// The source as jinja2 sees it: \r\n and \r become \n, and one trailing newline is dropped
/// (keep_trailing_newline=False).
std::string normalize_source(const std::string& source);

/// The tokens of normalized `source`, ending with kEof. Throws Error (kSyntax) for an
/// unterminated comment or raw block, an invalid character or escape, or unbalanced brackets.
std::vector<Token> tokenize(const std::string& source);

/// A 1-based line and column (in code points).
struct Location {
  std::size_t line = 1;
  std::size_t column = 1;
};

/// The line and column of byte `position` of `source`.
Location locate(const std::string& source, std::size_t position);

/// How a token is named in messages: a name or operator as written, else its kind
/// ("end of statement block", "end of template").
std::string describe(const Token& token);

}  // namespace bigbatch::text::jinja
