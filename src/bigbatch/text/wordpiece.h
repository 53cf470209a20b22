// The WordPiece model (BERT): greedy longest-match-first with a continuation prefix.
#pragma once

#include <string>

#include "bigbatch/text/model.h"

namespace bigbatch::text {

/// tokenizers' WordPiece model.
class WordPiece : public Model {
 public:
  /// Reads vocab, unk_token, continuing_subword_prefix and max_input_chars_per_word.
  WordPiece(const nlohmann::json& j, const JsonPlace& place);
  void tokenize(const std::string& word, std::vector<int64_t>& out) const override;
  const Vocab& vocab() const override { return vocab_; }
  std::string name() const override { return "WordPiece"; }

 private:
  Vocab vocab_;
  int64_t unk_id_ = 0;
  std::string prefix_;
  std::size_t max_chars_ = 100;
};

}  // namespace bigbatch::text
