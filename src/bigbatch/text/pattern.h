// The "pattern" of a Split pre-tokenizer or a Replace normalizer/decoder: {"String": ...} (a
// literal) or {"Regex": ...} (Oniguruma).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"
#include "bigbatch/text/regex.h"

namespace bigbatch::text {

/// A literal string or a regular expression to find in text.
class Pattern {
 public:
  /// Reads {"String": s} or {"Regex": r}; throws InputError naming `place` otherwise.
  Pattern(const nlohmann::json& j, const JsonPlace& place);
  /// The byte spans of the successive non-overlapping matches in `text`.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(const std::string& text) const;
  /// `text` with every match replaced by `content`.
  std::string replace_all(const std::string& text, const std::string& content) const;

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

}  // namespace bigbatch::text
