#include "bigbatch/text/precompiled.h"

#include <cstring>

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {
namespace {

/// The bytes of standard base64 `text` (padding optional); std::nullopt when it is not base64.
std::optional<std::string> base64_decode(const std::string& text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z')
      value = c - 'A';
    else if (c >= 'a' && c <= 'z')
      value = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      value = c - '0' + 52;
    else if (c == '+')
      value = 62;
    else if (c == '/')
      value = 63;
    else if (c == '=')
      break;
    else
      return std::nullopt;
    bits = (bits << 6) | uint32_t(value);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

// The fields of a unit of the double array (SentencePiece's Darts-clone).
uint32_t offset_of(uint32_t unit) {
  return (unit >> 10) << ((unit & (1u << 9)) >> 6);
}
uint32_t label_of(uint32_t unit) {
  return unit & ((1u << 31) | 0xFF);
}
bool has_leaf(uint32_t unit) {
  return ((unit >> 8) & 1) != 0;
}
uint32_t value_of(uint32_t unit) {
  return unit & ((1u << 31) - 1);
}

}  // namespace

PrecompiledNormalizer::PrecompiledNormalizer(const nlohmann::json& j, const JsonPlace& place) {
  const JsonPlace at = place.at("precompiled_charsmap");
  const std::optional<std::string> bytes =
      base64_decode(string_member(j, "precompiled_charsmap", place));
  BB_CHECK_INPUT(bytes && bytes->size() >= 4, at.str(),
                 ": expected base64 of a SentencePiece charsmap (at least 4 bytes)");
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i)
    trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>((*bytes)[i]);
  BB_CHECK_INPUT(
      trie_bytes % 4 == 0 && trie_bytes >= 4 && 4 + std::size_t(trie_bytes) <= bytes->size(),
      at.str(), ": the trie's size ", trie_bytes, " does not fit the ", bytes->size(),
      " bytes of the charsmap");
  trie_.resize(trie_bytes / 4);
  for (std::size_t u = 0; u < trie_.size(); ++u) {
    uint32_t unit = 0;
    for (int i = 3; i >= 0; --i)
      unit = (unit << 8) | static_cast<unsigned char>((*bytes)[4 + 4 * u + i]);
    trie_[u] = unit;
  }
  replacements_ = bytes->substr(4 + trie_bytes);
}

std::optional<std::string_view> PrecompiledNormalizer::replacement(std::string_view chunk) const {
  std::size_t node = offset_of(trie_[0]);
  for (const char byte : chunk) {
    const auto c = static_cast<unsigned char>(byte);
    if (c == 0)
      return std::nullopt;
    node ^= c;
    if (node >= trie_.size() || label_of(trie_[node]) != c)
      return std::nullopt;
    const uint32_t unit = trie_[node];
    node ^= offset_of(unit);
    if (node >= trie_.size())
      return std::nullopt;
    if (has_leaf(unit)) {  // the shortest key that begins the chunk
      const std::size_t start = value_of(trie_[node]);
      if (start >= replacements_.size())
        return std::nullopt;
      const std::size_t nul = replacements_.find('\0', start);
      return std::string_view(replacements_)
          .substr(start, (nul == std::string::npos ? replacements_.size() : nul) - start);
    }
  }
  return std::nullopt;
}

std::string PrecompiledNormalizer::normalize(const std::string& text) const {
  std::string out;
  out.reserve(text.size());
  std::size_t begin = 0;
  for (const std::size_t end : grapheme_ends(text)) {
    const std::string_view grapheme(text.data() + begin, end - begin);
    if (grapheme.size() < 6) {
      if (const auto whole = replacement(grapheme)) {
        out.append(*whole);
        begin = end;
        continue;
      }
    }
    for (std::size_t pos = begin; pos < end;) {
      char32_t cp;
      const std::string_view character(text.data() + pos, next_code_point(text, pos, cp));
      const auto replaced = replacement(character);
      out.append(replaced ? *replaced : character);
      pos += character.size();
    }
    begin = end;
  }
  return out;
}

}  // namespace bigbatch::text
