#include "bigbatch/text/jinja_lexer.h"

#include <unicode/uchar.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_strings.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// The escape that Python's backslashreplace writes for a non-ASCII code point, without the
/// backslash: "xe9", "u4e16", "U0001f642".
std::string backslash_replacement(char32_t cp) {
  char buf[16];
  if (cp <= 0xFF)
    std::snprintf(buf, sizeof buf, "x%02x", static_cast<unsigned>(cp));
  else if (cp <= 0xFFFF)
    std::snprintf(buf, sizeof buf, "u%04x", static_cast<unsigned>(cp));
  else
    std::snprintf(buf, sizeof buf, "U%08x", static_cast<unsigned>(cp));
  return buf;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : s_(source) {}

  std::vector<Token> run() {
    while (pos_ < s_.size())
      root();
    push(TokenKind::kEof, "", s_.size());
    return std::move(tokens_);
  }

 private:
  void push(TokenKind kind, std::string text, std::size_t position) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.position = position;
    tokens_.push_back(std::move(t));
  }

  [[noreturn]] void error(const std::string& message, std::size_t position) const {
    fail(ErrorKind::kSyntax, message, position);
  }

  bool at(std::size_t p, std::string_view what) const {
    return s_.compare(p, what.size(), what) == 0;
  }

  /// The end of the run of Python whitespace starting at `p`.
  std::size_t skip_space(std::size_t p) const {
    while (p < s_.size()) {
      std::size_t q = p;
      if (!is_python_space(decode_code_point(s_, q)))
        break;
      p = q;
    }
    return p;
  }

  bool all_space(std::string_view text) const {
    if (text.empty())
      return false;
    for (std::size_t p = 0; p < text.size();) {
      if (!is_python_space(decode_code_point(text, p)))
        return false;
    }
    return true;
  }

  /// The text before a tag, with its whitespace control: `sign` '-' strips all whitespace at its
  /// end; otherwise (and not '+') a block or comment tag alone on its line takes the
  /// whitespace that precedes it on that line (lstrip_blocks).
  void push_text(std::string text, std::size_t position, char sign, bool lstrip) {
    if (sign == '-') {
      text = python_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip) {
      const std::size_t newline = text.rfind('\n');
      const std::size_t line_start = newline == std::string::npos ? 0 : newline + 1;
      if ((line_start > 0 || line_starting_) &&
          all_space(std::string_view(text).substr(line_start)))
        text.erase(line_start);
    }
    if (!text.empty())
      push(TokenKind::kData, std::move(text), position);
  }

  /// Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at `p`; returns its end, or npos.
  std::size_t match_raw_begin(std::size_t p) const {
    std::size_t q = p + 2;
    if (q < s_.size() && (s_[q] == '-' || s_[q] == '+'))
      ++q;
    q = skip_space(q);
    if (!at(q, "raw"))
      return std::string::npos;
    q = skip_space(q + 3);
    if (at(q, "-%}"))
      return skip_space(q + 3);
    if (at(q, "%}"))
      return q + 2;
    return std::string::npos;
  }

  /// Matches `{%([-+]?)\s*endraw\s*(\+%}|-%}\s*|%}\n?)` at `p`; returns its end, or npos.
  std::size_t match_raw_end(std::size_t p, char& sign) const {
    std::size_t q = p + 2;
    sign = 0;
    if (q < s_.size() && (s_[q] == '-' || s_[q] == '+'))
      sign = s_[q++];
    q = skip_space(q);
    if (!at(q, "endraw"))
      return std::string::npos;
    q = skip_space(q + 6);
    if (at(q, "+%}"))
      return q + 3;
    if (at(q, "-%}"))
      return skip_space(q + 3);
    if (at(q, "%}"))
      return q + 2 + (at(q + 2, "\n") ? 1 : 0);
    return std::string::npos;
  }

  void root() {
    std::size_t i = pos_;
    while (true) {
      i = s_.find('{', i);
      if (i == std::string::npos || i + 1 >= s_.size()) {
        push(TokenKind::kData, s_.substr(pos_), pos_);
        pos_ = s_.size();
        return;
      }
      const char kind = s_[i + 1];
      if (kind == '{' || kind == '%' || kind == '#')
        break;
      ++i;
    }
    const char kind = s_[i + 1];
    const char sign = i + 2 < s_.size() && (s_[i + 2] == '-' || s_[i + 2] == '+') ? s_[i + 2] : 0;
    const std::size_t text_start = pos_;
    std::string text = s_.substr(pos_, i - pos_);
    if (kind == '%') {
      const std::size_t raw_end = match_raw_begin(i);
      if (raw_end != std::string::npos) {
        push_text(std::move(text), text_start, sign, true);
        line_starting_ = s_[raw_end - 1] == '\n';
        raw(raw_end, i);
        return;
      }
    }
    push_text(std::move(text), text_start, sign, kind != '{');
    const std::size_t body = i + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      comment(body, i);
    } else if (kind == '%') {
      push(TokenKind::kBlockBegin, "{%", i);
      pos_ = body;
      tag(false);
    } else {
      push(TokenKind::kVariableBegin, "{{", i);
      pos_ = body;
      tag(true);
    }
  }

  void comment(std::size_t body, std::size_t begin) {
    std::size_t q = s_.find("#}", body);
    if (q == std::string::npos)
      error("Missing end of comment tag", begin);
    std::size_t end = q + 2;
    if (q > body && s_[q - 1] == '-')
      end = skip_space(end);
    else if (!(q > body && s_[q - 1] == '+') && at(end, "\n"))
      ++end;
    line_starting_ = s_[end - 1] == '\n';
    pos_ = end;
  }

  void raw(std::size_t body, std::size_t begin) {
    for (std::size_t k = s_.find("{%", body); k != std::string::npos; k = s_.find("{%", k + 1)) {
      char sign = 0;
      const std::size_t end = match_raw_end(k, sign);
      if (end == std::string::npos)
        continue;
      push_text(s_.substr(body, k - body), body, sign, true);
      line_starting_ = s_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    error("Missing end of raw directive", begin);
  }

  /// Tokens inside {{ }} (`variable`) or {% %} up to and including the closing delimiter.
  void tag(bool variable) {
    std::vector<char> balance;
    while (pos_ < s_.size()) {
      if (balance.empty()) {
        const std::size_t end = closing(variable);
        if (end != std::string::npos) {
          push(variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, variable ? "}}" : "%}",
               pos_);
          line_starting_ = s_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      std::size_t q = pos_;
      if (is_python_space(decode_code_point(s_, q))) {
        pos_ = skip_space(pos_);
        continue;
      }
      if (number())
        continue;
      if (is_name_start(s_[pos_])) {
        std::size_t e = pos_;
        while (e < s_.size() && is_name_char(s_[e]))
          ++e;
        push(TokenKind::kName, s_.substr(pos_, e - pos_), pos_);
        pos_ = e;
        continue;
      }
      if ((s_[pos_] == '\'' || s_[pos_] == '"') && string())
        continue;
      op(balance);
    }
    // The source ended inside the tag: the parser reports what it expected.
  }

  /// The end of the closing delimiter at pos_, or npos.
  std::size_t closing(bool variable) const {
    if (variable) {
      if (at(pos_, "-}}"))
        return skip_space(pos_ + 3);
      if (at(pos_, "}}"))
        return pos_ + 2;
      return std::string::npos;
    }
    if (at(pos_, "+%}"))
      return pos_ + 3;
    if (at(pos_, "-%}"))
      return skip_space(pos_ + 3);
    if (at(pos_, "%}"))
      return pos_ + 2 + (at(pos_ + 2, "\n") ? 1 : 0);
    return std::string::npos;
  }

  /// Digits with single underscores between them, from `p`; returns the end (p if none).
  std::size_t digits(std::size_t p) const {
    if (p >= s_.size() || !is_digit(s_[p]))
      return p;
    std::size_t e = p + 1;
    while (e < s_.size()) {
      if (is_digit(s_[e]))
        ++e;
      else if (s_[e] == '_' && e + 1 < s_.size() && is_digit(s_[e + 1]))
        e += 2;
      else
        break;
    }
    return e;
  }

  /// A float or integer literal at pos_ (jinja2's float_re, then integer_re).
  bool number() {
    const std::size_t p = pos_;
    if (!is_digit(s_[p]))
      return false;
    if (p == 0 || s_[p - 1] != '.') {
      const std::size_t int_end = digits(p);
      std::size_t e = std::string::npos;
      std::size_t frac_end = int_end;
      if (at(int_end, ".") && digits(int_end + 1) > int_end + 1)
        frac_end = digits(int_end + 1);
      if (frac_end < s_.size() && (s_[frac_end] == 'e' || s_[frac_end] == 'E')) {
        std::size_t x = frac_end + 1;
        if (x < s_.size() && (s_[x] == '+' || s_[x] == '-'))
          ++x;
        if (digits(x) > x)
          e = digits(x);
      }
      if (e == std::string::npos && frac_end > int_end)
        e = frac_end;
      if (e != std::string::npos) {
        std::string text;
        for (std::size_t i = p; i < e; ++i) {
          if (s_[i] != '_')
            text += s_[i];
        }
        Token t;
        t.kind = TokenKind::kFloat;
        t.text = s_.substr(p, e - p);
        t.number = std::strtod(text.c_str(), nullptr);
        t.position = p;
        tokens_.push_back(std::move(t));
        pos_ = e;
        return true;
      }
    }
    // Integers: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)*.
    int base = 10;
    std::size_t start = p, e = p;
    const char prefix = p + 1 < s_.size() ? static_cast<char>(s_[p + 1] | 0x20) : 0;
    auto radix_digits = [&](std::size_t from, int radix) {
      std::size_t q = from;
      while (q < s_.size()) {
        const std::size_t d = s_[q] == '_' ? q + 1 : q;
        if (d >= s_.size())
          break;
        const int v = hex_value(s_[d]);
        if (v < 0 || v >= radix)
          break;
        q = d + 1;
      }
      return q;
    };
    if (s_[p] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
      const std::size_t q = radix_digits(p + 2, base);
      if (q > p + 2) {
        start = p + 2;
        e = q;
      }
    }
    if (e == p) {
      base = 10;
      if (s_[p] == '0') {
        e = p + 1;
        while (e < s_.size() && (s_[e] == '0' || (s_[e] == '_' && at(e + 1, "0"))))
          e += s_[e] == '_' ? 2 : 1;
      } else {
        e = digits(p);
      }
    }
    std::string text;
    for (std::size_t i = start; i < e; ++i) {
      if (s_[i] != '_')
        text += s_[i];
    }
    errno = 0;
    const long long value = std::strtoll(text.c_str(), nullptr, base);
    if (errno == ERANGE)
      fail(ErrorKind::kUnsupported, "integer literal " + s_.substr(p, e - p) + " is beyond 64 bits",
           p);
    Token t;
    t.kind = TokenKind::kInteger;
    t.text = s_.substr(p, e - p);
    t.integer = value;
    t.position = p;
    tokens_.push_back(std::move(t));
    pos_ = e;
    return true;
  }

  /// A quoted string at pos_, unescaped as Python's unicode-escape codec does; false if it is
  /// not terminated.
  bool string() {
    const char quote = s_[pos_];
    std::size_t e = pos_ + 1;
    while (e < s_.size() && s_[e] != quote) {
      if (s_[e] == '\\')
        ++e;
      ++e;
    }
    if (e >= s_.size())
      return false;
    Token t;
    t.kind = TokenKind::kString;
    t.text = unescape(pos_ + 1, e);
    t.position = pos_;
    tokens_.push_back(std::move(t));
    pos_ = e + 1;
    return true;
  }

  std::string unescape(std::size_t begin, std::size_t end) const {
    std::string out;
    std::size_t p = begin;
    auto hex = [&](std::size_t from, std::size_t count, const char* what) -> char32_t {
      if (from + count > end)
        error(std::string("truncated ") + what + " escape", p);
      char32_t v = 0;
      for (std::size_t i = from; i < from + count; ++i) {
        const int d = hex_value(s_[i]);
        if (d < 0)
          error(std::string("truncated ") + what + " escape", p);
        v = v * 16 + static_cast<char32_t>(d);
      }
      return v;
    };
    auto code_point = [&](char32_t cp) {
      if (cp > 0x10FFFF)
        error("illegal Unicode character", p);
      if (cp >= 0xD800 && cp <= 0xDFFF)
        fail(ErrorKind::kUnsupported, "surrogate code points in string literals are not supported",
             p);
      append_utf8(out, cp);
    };
    while (p < end) {
      if (s_[p] != '\\') {
        out += s_[p++];
        continue;
      }
      const std::size_t escape = p;
      const char c = s_[p + 1];
      std::size_t next = p + 2;
      if (static_cast<unsigned char>(c) >= 0x80) {
        std::size_t q = p + 1;
        const char32_t cp = decode_code_point(s_, q);
        out += '\\';
        out += backslash_replacement(cp);
        next = q;
      } else if (c == '\n') {
        // A backslash before a newline joins the lines.
      } else if (c == '\\' || c == '\'' || c == '"') {
        out += c;
      } else if (c == 'a') {
        out += '\a';
      } else if (c == 'b') {
        out += '\b';
      } else if (c == 'f') {
        out += '\f';
      } else if (c == 'n') {
        out += '\n';
      } else if (c == 'r') {
        out += '\r';
      } else if (c == 't') {
        out += '\t';
      } else if (c == 'v') {
        out += '\v';
      } else if (c >= '0' && c <= '7') {
        char32_t v = 0;
        std::size_t q = p + 1;
        while (q < end && q < p + 4 && s_[q] >= '0' && s_[q] <= '7')
          v = v * 8 + static_cast<char32_t>(s_[q++] - '0');
        code_point(v);
        next = q;
      } else if (c == 'x') {
        code_point(hex(p + 2, 2, "\\xXX"));
        next = p + 4;
      } else if (c == 'u') {
        code_point(hex(p + 2, 4, "\\uXXXX"));
        next = p + 6;
      } else if (c == 'U') {
        code_point(hex(p + 2, 8, "\\UXXXXXXXX"));
        next = p + 10;
      } else if (c == 'N') {
        const std::size_t close = s_.find('}', p);
        if (p + 2 >= end || s_[p + 2] != '{' || close == std::string::npos || close >= end)
          error("malformed \\N character escape", escape);
        const std::string name = s_.substr(p + 3, close - p - 3);
        UErrorCode status = U_ZERO_ERROR;
        const UChar32 cp = u_charFromName(U_EXTENDED_CHAR_NAME, name.c_str(), &status);
        if (U_FAILURE(status) || cp < 0)
          error("unknown Unicode character name", escape);
        code_point(static_cast<char32_t>(cp));
        next = close + 1;
      } else {
        out += '\\';
        out += c;
      }
      p = next;
    }
    return out;
  }

  void op(std::vector<char>& balance) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* two : kTwo) {
      if (at(pos_, two)) {
        push(TokenKind::kOperator, two, pos_);
        pos_ += 2;
        return;
      }
    }
    const char c = s_[pos_];
    static const std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      std::size_t q = pos_;
      decode_code_point(s_, q);
      std::string shown;
      append_python_repr(shown, s_.substr(pos_, q - pos_));
      error("unexpected char " + shown, pos_);
    }
    if (c == '{' || c == '(' || c == '[') {
      balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
    } else if (c == '}' || c == ')' || c == ']') {
      if (balance.empty())
        error(std::string("unexpected '") + c + "'", pos_);
      const char expected = balance.back();
      balance.pop_back();
      if (expected != c)
        error(std::string("unexpected '") + c + "', expected '" + expected + "'", pos_);
    }
    push(TokenKind::kOperator, std::string(1, c), pos_);
    ++pos_;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n')
        ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& source) {
  return Lexer(source).run();
}

Location locate(const std::string& source, std::size_t position) {
  Location loc;
  const std::size_t end = std::min(position, source.size());
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < end; ++i) {
    if (source[i] == '\n') {
      ++loc.line;
      line_start = i + 1;
    }
  }
  loc.column = 1 + code_point_count(std::string_view(source).substr(line_start, end - line_start));
  return loc;
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kData:
      return "template data / text";
    case TokenKind::kVariableBegin:
      return "begin of print statement";
    case TokenKind::kVariableEnd:
      return "end of print statement";
    case TokenKind::kBlockBegin:
      return "begin of statement block";
    case TokenKind::kBlockEnd:
      return "end of statement block";
    case TokenKind::kName:
    case TokenKind::kOperator:
      return token.text;
    case TokenKind::kString:
      return "string";
    case TokenKind::kInteger:
      return "integer";
    case TokenKind::kFloat:
      return "float";
    case TokenKind::kEof:
      return "end of template";
  }
  return "token";
}

}  // namespace bigbatch::text::jinja
