// SentencePiece's compiled normalization rules (tokenizer.json's "Precompiled" normalizer, as
// XLM-RoBERTa, T5 and ALBERT carry theirs): a double-array trie of UTF-8 sequences, each mapped to
// its replacement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bigbatch/text/normalizers.h"

namespace bigbatch::text {

/// tokenizers' Precompiled normalizer over a "precompiled_charsmap" (base64 of: the trie's size
/// in bytes as a little-endian uint32, the trie's uint32 units, then the replacements, each
/// ending in NUL).
class PrecompiledNormalizer : public Normalizer {
 public:
  /// Reads and checks "precompiled_charsmap"; InputError naming `place` when it is not base64 of
  /// that layout.
  PrecompiledNormalizer(const nlohmann::json& j, const JsonPlace& place);
  /// Each extended grapheme cluster of fewer than 6 bytes replaced whole when the trie has a key
  /// that begins it, else each of its characters replaced when the trie has one (tokenizers'
  /// rule, which SentencePiece's normalizer approximates).
  std::string normalize(const std::string& text) const override;

 private:
  /// The replacement of the shortest key that begins `chunk`, if any.
  std::optional<std::string_view> replacement(std::string_view chunk) const;

  std::vector<uint32_t> trie_;
  std::string replacements_;
};

}  // namespace bigbatch::text
