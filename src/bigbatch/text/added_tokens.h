// tokenizer.json's "added_tokens": tokens matched in the text before the model sees it.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"
#include "bigbatch/text/normalizers.h"
#include "bigbatch/text/pre_tokenizers.h"

namespace bigbatch::text {

/// One entry of "added_tokens".
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;      ///< skipped by decode(skip_special_tokens = true)
  bool lstrip = false;       ///< takes the whitespace on its left
  bool rstrip = false;       ///< takes the whitespace on its right
  bool single_word = false;  ///< matches only between non-word characters
  bool normalized = false;   ///< matched in the normalized text (else in the original)
};

/// The added tokens, and the splitting of text at them (tokenizers' AddedVocabulary).
class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  /// Reads the "added_tokens" list; the content of normalized tokens is normalized with
  /// `normalizer` (may be null) as tokenizers does, so that it is found in normalized text.
  AddedVocabulary(const nlohmann::json& list, const JsonPlace& place, const Normalizer* normalizer);
  /// Splits every piece without a token at the added tokens whose `normalized` flag equals
  /// `normalized`: leftmost first, the longest at one place, non-overlapping.
  void split(std::vector<Piece>& pieces, bool normalized) const;
  /// The id of an added token's content.
  std::optional<int64_t> token_to_id(const std::string& content) const;
  /// The added token with id `id`, or nullptr.
  const AddedToken* find(int64_t id) const;
  /// The largest id + 1 (0 when there are none).
  int64_t end_id() const { return end_id_; }

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::string> patterns_;  ///< what is matched for tokens_[i]
  std::unordered_map<int64_t, std::size_t> by_id_;
  std::unordered_map<std::string, int64_t> by_content_;
  int64_t end_id_ = 0;
  std::bitset<256> first_bytes_;  ///< the first bytes of the patterns
};

}  // namespace bigbatch::text
