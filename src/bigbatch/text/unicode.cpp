#include "bigbatch/text/unicode.h"

#include <memory>

#include <unicode/brkiter.h>
#include <unicode/errorcode.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "bigbatch/core/check.h"

namespace bigbatch::text {
namespace {

/// What stands at byte `pos` of `s`: a valid UTF-8 sequence of `length` bytes (`valid`), or
/// the maximal prefix of one, at least 1 byte, which one U+FFFD replaces.
struct Scan {
  std::size_t length;
  bool valid;
};

Scan scan_sequence(const std::string& s, std::size_t pos) {
  const unsigned char b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80)
    return {1, true};
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    lo = b0 == 0xE0 ? 0xA0 : 0x80;
    hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    lo = b0 == 0xF0 ? 0x90 : 0x80;
    hi = b0 == 0xF4 ? 0x8F : 0xBF;
  } else {
    return {1, false};
  }
  for (std::size_t i = 1; i < n; ++i) {
    if (pos + i >= s.size())
      return {i, false};
    const unsigned char b = static_cast<unsigned char>(s[pos + i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF))
      return {i, false};
  }
  return {n, true};
}

int8_t category(char32_t cp) {
  return u_charType(static_cast<UChar32>(cp));
}

const icu::Normalizer2& normalizer_of(NormalForm form) {
  icu::ErrorCode status;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalForm::kNFD:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalForm::kNFKC:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalForm::kNFKD:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  BB_CHECK(status.isSuccess() && n, "ICU normalizer unavailable: ", status.errorName());
  return *n;
}

}  // namespace

std::size_t next_code_point(const std::string& text, std::size_t pos, char32_t& cp) {
  const unsigned char b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  const std::size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  cp = b0 & (0x7F >> n);
  for (std::size_t i = 1; i < n; ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  return n;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(const std::string& bytes) {
  for (std::size_t pos = 0; pos < bytes.size();) {
    const Scan scan = scan_sequence(bytes, pos);
    if (!scan.valid)
      return false;
    pos += scan.length;
  }
  return true;
}

void check_utf8(const std::string& text, const std::string& what) {
  for (std::size_t pos = 0; pos < text.size();) {
    const Scan scan = scan_sequence(text, pos);
    BB_CHECK_INPUT(scan.valid, what, " is not valid UTF-8 (byte ", pos, " of ", text.size(), ")");
    pos += scan.length;
  }
}

std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t pos = 0; pos < bytes.size();) {
    const Scan scan = scan_sequence(bytes, pos);
    if (scan.valid)
      out.append(bytes, pos, scan.length);
    else
      out += "\xEF\xBF\xBD";
    pos += scan.length;
  }
  return out;
}

std::vector<std::size_t> grapheme_ends(const std::string& text) {
  // UTF-16 for ICU, with the UTF-8 offset of every UTF-16 index.
  icu::UnicodeString utf16;
  std::vector<std::size_t> byte_at;
  for (std::size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const std::size_t n = next_code_point(text, pos, cp);
    for (int unit = 0; unit < U16_LENGTH(cp); ++unit)
      byte_at.push_back(pos);
    utf16.append(static_cast<UChar32>(cp));
    pos += n;
  }
  byte_at.push_back(text.size());
  icu::ErrorCode status;
  std::unique_ptr<icu::BreakIterator> breaks(
      icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
  BB_CHECK(status.isSuccess(), "ICU's character break iterator: ", status.errorName());
  breaks->setText(utf16);
  std::vector<std::size_t> ends;
  for (int32_t end = breaks->next(); end != icu::BreakIterator::DONE; end = breaks->next())
    ends.push_back(byte_at[end]);
  return ends;
}

std::string normalize(const std::string& text, NormalForm form) {
  const icu::Normalizer2& n = normalizer_of(form);
  icu::ErrorCode status;
  if (n.isNormalizedUTF8(text, status) && status.isSuccess())
    return text;
  status.reset();
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  n.normalizeUTF8(0, text, sink, nullptr, status);
  BB_CHECK(status.isSuccess(), "ICU normalization failed: ", status.errorName());
  return out;
}

std::string lowercase(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const std::size_t n = next_code_point(text, pos, cp);
    if (cp < 0x80) {
      out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else {
      // The full mapping of one code point with no context (u_strToLower on it alone).
      UChar source[2];
      int32_t length = 0;
      U16_APPEND_UNSAFE(source, length, static_cast<UChar32>(cp));
      UChar lowered[8];
      UErrorCode status = U_ZERO_ERROR;
      const int32_t size = u_strToLower(lowered, 8, source, length, "", &status);
      BB_CHECK(U_SUCCESS(status), "ICU lowercase failed: ", u_errorName(status));
      for (int32_t i = 0; i < size;) {
        UChar32 c;
        U16_NEXT_UNSAFE(lowered, i, c);
        append_utf8(out, static_cast<char32_t>(c));
      }
    }
    pos += n;
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool is_punctuation(char32_t cp) {
  return u_ispunct(static_cast<UChar32>(cp));
}

bool is_other(char32_t cp) {
  const int8_t c = category(cp);
  return c == U_CONTROL_CHAR || c == U_FORMAT_CHAR || c == U_UNASSIGNED ||
         c == U_PRIVATE_USE_CHAR || c == U_SURROGATE;
}

bool is_nonspacing_mark(char32_t cp) {
  return category(cp) == U_NON_SPACING_MARK;
}

bool is_mark(char32_t cp) {
  const int8_t c = category(cp);
  return c == U_NON_SPACING_MARK || c == U_COMBINING_SPACING_MARK || c == U_ENCLOSING_MARK;
}

bool is_numeric(char32_t cp) {
  const int8_t c = category(cp);
  return c == U_DECIMAL_DIGIT_NUMBER || c == U_LETTER_NUMBER || c == U_OTHER_NUMBER;
}

bool is_alphanumeric(char32_t cp) {
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_ALPHABETIC) || is_numeric(cp);
}

bool is_chinese_char(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace bigbatch::text
