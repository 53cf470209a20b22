#include "bigbatch/text/wordpiece.h"

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

WordPiece::WordPiece(const nlohmann::json& j, const JsonPlace& place)
    : vocab_(Vocab::from_json(member(j, "vocab", place), place.at("vocab"))),
      prefix_(optional_string(j, "continuing_subword_prefix", place).value_or("##")) {
  const std::string unk = optional_string(j, "unk_token", place).value_or("[UNK]");
  const auto id = vocab_.find(unk);
  BB_CHECK_INPUT(id, place.at("unk_token").str(), ": the unknown token \"", unk,
                 "\" is not in the vocabulary");
  unk_id_ = *id;
  const int64_t max_chars = int_member(j, "max_input_chars_per_word", place, 100);
  BB_CHECK_INPUT(max_chars > 0, place.at("max_input_chars_per_word").str(),
                 ": expected a positive number, got ", max_chars);
  max_chars_ = static_cast<std::size_t>(max_chars);
}

void WordPiece::tokenize(const std::string& word, std::vector<int64_t>& out) const {
  // Character boundaries: a piece always ends at one.
  std::vector<std::size_t> bounds;
  for (std::size_t pos = 0; pos < word.size();) {
    bounds.push_back(pos);
    char32_t cp;
    pos += next_code_point(word, pos, cp);
  }
  if (bounds.size() > max_chars_) {
    out.push_back(unk_id_);
    return;
  }
  bounds.push_back(word.size());
  const std::size_t first = out.size();
  std::size_t start = 0;  // index into bounds
  std::string candidate;
  while (start + 1 < bounds.size()) {
    std::optional<int64_t> found;
    std::size_t end = bounds.size() - 1;
    for (; end > start; --end) {
      candidate.clear();
      if (start > 0)
        candidate = prefix_;
      candidate.append(word, bounds[start], bounds[end] - bounds[start]);
      found = vocab_.find(candidate);
      if (found)
        break;
    }
    if (!found) {
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(*found);
    start = end;
  }
}

}  // namespace bigbatch::text
