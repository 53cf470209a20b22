// The Unigram model (SentencePiece's, as tokenizers runs it: XLM-RoBERTa, T5, ALBERT): the
// segmentation of a word into pieces with the highest total log-probability.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/text/model.h"

namespace bigbatch::text {

/// tokenizers' Unigram model (its optimized Viterbi search, unknown pieces fused).
class Unigram : public Model {
 public:
  /// Reads vocab ([[piece, score], ...], the id being the index), unk_id and byte_fallback.
  Unigram(const nlohmann::json& j, const JsonPlace& place);
  void tokenize(const std::string& word, std::vector<int64_t>& out) const override;
  const Vocab& vocab() const override { return vocab_; }
  std::string name() const override { return "Unigram"; }

 private:
  /// The best segmentation of `word` as pieces of its bytes; a run of characters no piece covers
  /// is one piece (not in the vocabulary).
  std::vector<std::string> segment(const std::string& word) const;

  Vocab vocab_;
  std::vector<double> scores_;  ///< by id
  std::optional<int64_t> unk_id_;
  bool byte_fallback_ = false;
  double unk_score_ = 0.0;         ///< the lowest score less 10, as SentencePiece scores unknowns
  std::size_t longest_piece_ = 0;  ///< in bytes
  std::array<int64_t, 256> byte_ids_{};  ///< "<0xAB>" pieces, -1 where absent
};

}  // namespace bigbatch::text
