// Oniguruma regular expressions: the engine Hugging Face tokenizers itself uses (its onig crate),
// so \p{L}, \s, (?i:...) and lookaheads match the same text.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch::text {

/// A compiled pattern (Ruby syntax, UTF-8, as the onig crate's Regex::new).
class Regex {
 public:
  /// Compiles `pattern`; throws InputError naming `where` and Oniguruma's message if it is
  /// not a valid pattern.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// The byte spans [begin, end) of the successive non-overlapping matches in `text`, as the
  /// onig crate's find_iter gives them (an empty match right after the previous match is
  /// skipped by advancing one character).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(const std::string& text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bigbatch::text
