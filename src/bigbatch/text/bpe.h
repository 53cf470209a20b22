// The BPE model: byte-level (GPT-2, Llama 3, Qwen2) and with byte fallback (Llama 2).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "bigbatch/text/model.h"

namespace bigbatch::text {

/// tokenizers' BPE model without dropout: merges applied by rank (lowest first, leftmost
/// among equals), unknown characters to byte tokens (`byte_fallback`) or the unknown token.
class Bpe : public Model {
 public:
  /// Reads vocab, merges ("a b" strings or [a, b] pairs), unk_token, continuing_subword_prefix,
  /// end_of_word_suffix, fuse_unk, byte_fallback and ignore_merges; refuses a non-null dropout
  /// and merges of tokens the vocabulary lacks.
  Bpe(const nlohmann::json& j, const JsonPlace& place);
  void tokenize(const std::string& word, std::vector<int64_t>& out) const override;
  const Vocab& vocab() const override { return vocab_; }
  std::string name() const override { return "BPE"; }

 private:
  struct Merge {
    int64_t rank;
    int64_t new_id;
  };
  static uint64_t key(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
  }

  Vocab vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  ///< (left id, right id) -> rank and result
  std::optional<int64_t> unk_id_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int64_t, 256> byte_ids_;  ///< id of "<0xNN>", -1 where the vocabulary lacks it
};

}  // namespace bigbatch::text
