#include "bigbatch/text/jinja_strings.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text::jinja {
namespace {

/// `s` as UTF-16 for ICU.
std::u16string to_utf16(std::string_view s) {
  std::u16string out(s.size() + 1, u'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &length,
                s.data(), static_cast<int32_t>(s.size()), &status);
  if (U_FAILURE(status))
    fail(ErrorKind::kValue, "text is not valid UTF-8");
  out.resize(static_cast<std::size_t>(length));
  return out;
}

std::string to_utf8(const std::u16string& s) {
  std::string out(s.size() * 3 + 1, '\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &length,
              reinterpret_cast<const UChar*>(s.data()), static_cast<int32_t>(s.size()), &status);
  if (U_FAILURE(status))
    fail(ErrorKind::kValue, "case mapping failed");
  out.resize(static_cast<std::size_t>(length));
  return out;
}

enum class CaseMapping { kUpper, kLower, kTitle };

/// The full case mapping of `s` with ICU's root locale.
std::string map_case(std::string_view s, CaseMapping mapping) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (mapping == CaseMapping::kLower && c >= 'A' && c <= 'Z')
        c = static_cast<char>(c - 'A' + 'a');
      else if (mapping != CaseMapping::kLower && c >= 'a' && c <= 'z')
        c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  }
  const std::u16string in = to_utf16(s);
  std::u16string out(in.size() * 3 + 4, u'\0');
  UErrorCode status = U_ZERO_ERROR;
  const auto* src = reinterpret_cast<const UChar*>(in.data());
  auto* dst = reinterpret_cast<UChar*>(out.data());
  const auto src_length = static_cast<int32_t>(in.size());
  const auto capacity = static_cast<int32_t>(out.size());
  int32_t length = 0;
  switch (mapping) {
    case CaseMapping::kUpper:
      length = u_strToUpper(dst, capacity, src, src_length, "", &status);
      break;
    case CaseMapping::kLower:
      length = u_strToLower(dst, capacity, src, src_length, "", &status);
      break;
    case CaseMapping::kTitle:
      length = u_strToTitle(dst, capacity, src, src_length, nullptr, "", &status);
      break;
  }
  if (U_FAILURE(status))
    fail(ErrorKind::kValue, "case mapping failed");
  out.resize(static_cast<std::size_t>(length));
  return to_utf8(out);
}

std::string code_point_text(char32_t cp) {
  std::string out;
  append_utf8(out, cp);
  return out;
}

bool is_cased(char32_t cp) {
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_CASED);
}

/// Python's str.isprintable() for one code point: not in Cc, Cf, Cs, Co, Cn, Zl, Zp, nor in Zs
/// other than the space.
bool is_printable(char32_t cp) {
  if (cp == ' ')
    return true;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool is_line_break(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/// Byte offsets [begin, end) of s[start:end] (code point slice bounds, clamped as Python does).
std::pair<std::size_t, std::size_t> byte_range(std::string_view s, std::optional<int64_t> start,
                                               std::optional<int64_t> end) {
  if (!start && !end)
    return {0, s.size()};
  const std::vector<std::size_t> offsets = code_point_offsets(s);
  const auto n = static_cast<int64_t>(offsets.size() - 1);
  auto clamp = [n](std::optional<int64_t> i, int64_t fallback) {
    if (!i)
      return fallback;
    int64_t v = *i < 0 ? *i + n : *i;
    return std::clamp<int64_t>(v, 0, n);
  };
  const int64_t b = clamp(start, 0);
  const int64_t e = std::max(b, clamp(end, n));
  return {offsets[static_cast<std::size_t>(b)], offsets[static_cast<std::size_t>(e)]};
}

int64_t code_point_index(std::string_view s, std::size_t byte_offset) {
  return static_cast<int64_t>(code_point_count(s.substr(0, byte_offset)));
}

}  // namespace

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80)
      return false;
  }
  return true;
}

char32_t decode_code_point(std::string_view s, std::size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const std::size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t i = 1; i < n && pos + i < s.size(); ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

std::size_t code_point_count(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80)
      ++n;
  }
  return n;
}

std::vector<std::size_t> code_point_offsets(std::string_view s) {
  std::vector<std::size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80)
      offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string python_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                         bool right) {
  std::vector<char32_t> set;
  if (chars) {
    for (std::size_t p = 0; p < chars->size();)
      set.push_back(decode_code_point(*chars, p));
  }
  auto strippable = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_python_space(cp);
  };
  std::size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      std::size_t next = begin;
      if (!strippable(decode_code_point(s, next)))
        break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
        --start;
      std::size_t p = start;
      if (!strippable(decode_code_point(s, p)))
        break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> python_split(std::string_view s, const std::optional<std::string>& sep,
                                      int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty())
      fail(ErrorKind::kValue, "empty separator");
    if (!from_right) {
      std::size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const std::size_t at = s.find(*sep, start);
        if (at == std::string_view::npos)
          break;
        parts.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.emplace_back(s.substr(start));
    } else {
      std::size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size())
          break;
        const std::size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos)
          break;
        parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Runs of whitespace; the remainder after maxsplit splits keeps its whitespace.
  struct Word {
    std::size_t begin, end;
  };
  std::vector<Word> words;
  for (std::size_t p = 0; p < s.size();) {
    std::size_t q = p;
    if (is_python_space(decode_code_point(s, q))) {
      p = q;
      continue;
    }
    const std::size_t begin = p;
    std::size_t end = q;
    while (end < s.size()) {
      std::size_t r = end;
      if (is_python_space(decode_code_point(s, r)))
        break;
      end = r;
    }
    words.push_back({begin, end});
    p = end;
  }
  if (maxsplit < 0 || static_cast<std::size_t>(maxsplit) + 1 >= words.size()) {
    for (const Word& w : words)
      parts.emplace_back(s.substr(w.begin, w.end - w.begin));
    return parts;
  }
  const auto splits = static_cast<std::size_t>(maxsplit);
  if (!from_right) {
    for (std::size_t i = 0; i < splits; ++i)
      parts.emplace_back(s.substr(words[i].begin, words[i].end - words[i].begin));
    parts.emplace_back(s.substr(words[splits].begin));
  } else {
    const std::size_t first = words.size() - splits;
    parts.emplace_back(s.substr(0, words[first - 1].end));
    for (std::size_t i = first; i < words.size(); ++i)
      parts.emplace_back(s.substr(words[i].begin, words[i].end - words[i].begin));
  }
  return parts;
}

std::vector<std::string> python_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t p = 0; p < s.size();) {
    const std::size_t at = p;
    const char32_t cp = decode_code_point(s, p);
    if (!is_line_break(cp))
      continue;
    if (cp == '\r' && p < s.size() && s[p] == '\n')
      ++p;
    lines.emplace_back(s.substr(start, (keepends ? p : at) - start));
    start = p;
  }
  if (start < s.size())
    lines.emplace_back(s.substr(start));
  return lines;
}

std::string python_upper(std::string_view s) {
  return map_case(s, CaseMapping::kUpper);
}

std::string python_lower(std::string_view s) {
  return map_case(s, CaseMapping::kLower);
}

std::string python_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (std::size_t p = 0; p < s.size();) {
    const char32_t cp = decode_code_point(s, p);
    const std::string one = code_point_text(cp);
    out += previous_cased ? map_case(one, CaseMapping::kLower) : map_case(one, CaseMapping::kTitle);
    previous_cased = is_cased(cp);
  }
  return out;
}

std::string python_capitalize(std::string_view s) {
  if (s.empty())
    return {};
  std::size_t p = 0;
  const char32_t first = decode_code_point(s, p);
  return map_case(code_point_text(first), CaseMapping::kTitle) +
         map_case(s.substr(p), CaseMapping::kLower);
}

std::string python_swapcase(std::string_view s) {
  std::string out;
  for (std::size_t p = 0; p < s.size();) {
    const char32_t cp = decode_code_point(s, p);
    const std::string one = code_point_text(cp);
    if (u_isULowercase(static_cast<UChar32>(cp)))
      out += map_case(one, CaseMapping::kUpper);
    else if (u_isUUppercase(static_cast<UChar32>(cp)))
      out += map_case(one, CaseMapping::kLower);
    else
      out += one;
  }
  return out;
}

std::string python_replace(std::string_view s, std::string_view old, std::string_view repl,
                           int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    const std::vector<std::size_t> offsets = code_point_offsets(s);
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
    if (count < 0 || done < count)
      out += repl;
    return out;
  }
  std::size_t start = 0;
  while (count < 0 || done < count) {
    const std::size_t at = s.find(old, start);
    if (at == std::string_view::npos)
      break;
    out += s.substr(start, at - start);
    out += repl;
    start = at + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

int64_t python_find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
                    std::optional<int64_t> end, bool from_right) {
  const auto [b, e] = byte_range(s, start, end);
  if (sub.size() > e - b)
    return -1;
  const std::string_view window = s.substr(b, e - b);
  const std::size_t at = from_right ? window.rfind(sub) : window.find(sub);
  if (at == std::string_view::npos)
    return -1;
  return code_point_index(s, b + at);
}

int64_t python_count(std::string_view s, std::string_view sub, std::optional<int64_t> start,
                     std::optional<int64_t> end) {
  const auto [b, e] = byte_range(s, start, end);
  const std::string_view window = s.substr(b, e - b);
  if (sub.empty())
    return static_cast<int64_t>(code_point_count(window)) + 1;
  int64_t n = 0;
  for (std::size_t at = window.find(sub); at != std::string_view::npos;
       at = window.find(sub, at + sub.size()))
    ++n;
  return n;
}

bool python_is(std::string_view s, CharClass what) {
  if (s.empty())
    return false;
  bool any_cased = false;
  bool previous_cased = false;
  for (std::size_t p = 0; p < s.size();) {
    const auto cp = static_cast<UChar32>(decode_code_point(s, p));
    const int32_t numeric = u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE);
    const int8_t category = u_charType(cp);
    const bool alpha = category == U_UPPERCASE_LETTER || category == U_LOWERCASE_LETTER ||
                       category == U_TITLECASE_LETTER || category == U_MODIFIER_LETTER ||
                       category == U_OTHER_LETTER;
    switch (what) {
      case CharClass::kDigit:
        if (numeric != U_NT_DIGIT && numeric != U_NT_DECIMAL)
          return false;
        break;
      case CharClass::kDecimal:
        if (numeric != U_NT_DECIMAL)
          return false;
        break;
      case CharClass::kNumeric:
        if (numeric == U_NT_NONE)
          return false;
        break;
      case CharClass::kAlpha:
        if (!alpha)
          return false;
        break;
      case CharClass::kAlnum:
        if (!alpha && numeric == U_NT_NONE)
          return false;
        break;
      case CharClass::kSpace:
        if (!is_python_space(static_cast<char32_t>(cp)))
          return false;
        break;
      case CharClass::kUpper:
        if (u_isULowercase(cp) || category == U_TITLECASE_LETTER)
          return false;
        any_cased = any_cased || u_isUUppercase(cp);
        break;
      case CharClass::kLower:
        if (u_isUUppercase(cp) || category == U_TITLECASE_LETTER)
          return false;
        any_cased = any_cased || u_isULowercase(cp);
        break;
      case CharClass::kTitle: {
        const bool upper = u_isUUppercase(cp) || category == U_TITLECASE_LETTER;
        const bool lower = u_isULowercase(cp);
        if ((upper && previous_cased) || (lower && !previous_cased))
          return false;
        if (upper || lower) {
          any_cased = true;
          previous_cased = true;
        } else {
          previous_cased = false;
        }
        break;
      }
    }
  }
  if (what == CharClass::kUpper || what == CharClass::kLower || what == CharClass::kTitle)
    return any_cased;
  return true;
}

void append_python_repr(std::string& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  char buf[16];
  for (std::size_t p = 0; p < s.size();) {
    const std::size_t at = p;
    const char32_t cp = decode_code_point(s, p);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp < 0x7F || is_printable(cp)) {
      out += s.substr(at, p - at);
    } else if (cp <= 0xFF) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    }
  }
  out += quote;
}

std::string python_float_repr(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  // buf is [-]d[.ddd]e[+-]xx: split it into sign, digits and the decimal point's position.
  std::string text(buf);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const std::size_t e = text.find('e');
  std::string digits;
  for (std::size_t i = 0; i < e; ++i) {
    if (text[i] != '.')
      digits += text[i];
  }
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  const int exponent = std::atoi(text.c_str() + e + 1);
  const int point = exponent + 1;  // value = 0.digits * 10^point
  const auto n = static_cast<int>(digits.size());
  std::string out = sign;
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    } else if (point >= n) {
      out += digits + std::string(static_cast<std::size_t>(point - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(point)) + "." +
             digits.substr(static_cast<std::size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1)
    out += "." + digits.substr(1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buf;
}

std::string jinja_title(std::string_view s) {
  // re.split(r"([-\s({\[<]+)", s): words alternate with the separator runs kept between them.
  auto separator = [](char32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_python_space(cp);
  };
  std::string out;
  std::size_t p = 0;
  while (p < s.size()) {
    const std::size_t begin = p;
    std::size_t q = p;
    const bool sep = separator(decode_code_point(s, q));
    std::size_t end = q;
    while (end < s.size()) {
      std::size_t r = end;
      if (separator(decode_code_point(s, r)) != sep)
        break;
      end = r;
    }
    const std::string_view item = s.substr(begin, end - begin);
    out += map_case(item.substr(0, q - begin), CaseMapping::kUpper);
    out += map_case(item.substr(q - begin), CaseMapping::kLower);
    p = end;
  }
  return out;
}

SliceBounds slice_bounds(std::size_t length, std::optional<int64_t> start,
                         std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0)
    fail(ErrorKind::kValue, "slice step cannot be zero");
  const auto n = static_cast<int64_t>(length);
  const int64_t lower = st > 0 ? 0 : -1;
  const int64_t upper = st > 0 ? n : n - 1;
  auto adjust = [&](std::optional<int64_t> i, int64_t fallback) {
    if (!i)
      return fallback;
    int64_t v = *i;
    if (v < 0) {
      v += n;
      if (v < lower)
        v = lower;
    } else if (v > upper) {
      v = upper;
    }
    return v;
  };
  return {adjust(start, st > 0 ? lower : upper), adjust(stop, st > 0 ? upper : lower), st};
}

std::vector<std::size_t> slice_indices(std::size_t length, std::optional<int64_t> start,
                                       std::optional<int64_t> stop, std::optional<int64_t> step) {
  const SliceBounds b = slice_bounds(length, start, stop, step);
  std::vector<std::size_t> indices;
  for (int64_t i = b.start; b.step > 0 ? i < b.stop : i > b.stop; i += b.step)
    indices.push_back(static_cast<std::size_t>(i));
  return indices;
}

std::string python_slice(std::string_view s, std::optional<int64_t> start,
                         std::optional<int64_t> stop, std::optional<int64_t> step) {
  const bool ascii = is_ascii(s);
  std::vector<std::size_t> offsets;
  if (!ascii)
    offsets = code_point_offsets(s);
  const std::size_t n = ascii ? s.size() : offsets.size() - 1;
  std::string out;
  for (std::size_t i : slice_indices(n, start, stop, step)) {
    if (ascii)
      out += s[i];
    else
      out += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
  return out;
}

}  // namespace bigbatch::text::jinja
