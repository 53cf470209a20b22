// A SentencePiece tokenizer.model (Llama 2, TinyLlama) through libsentencepiece, with the BOS/EOS
// handling of transformers' LlamaTokenizer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bigbatch/text/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace bigbatch::text {

/// `directory`/tokenizer.model, adding BOS when tokenizer_config.json's add_bos_token (default
/// true) and EOS when its add_eos_token (default false) says so.
class SentencePieceTokenizer : public Tokenizer {
 public:
  /// Loads the model; throws InputError naming the file if libsentencepiece refuses it.
  explicit SentencePieceTokenizer(const std::string& directory);
  ~SentencePieceTokenizer() override;
  std::vector<int64_t> encode(const std::string& text,
                              bool add_special_tokens = true) const override;
  std::vector<int64_t> encode_pair(const std::string& first, const std::string& second,
                                   bool add_special_tokens = true) const override;
  /// Control tokens (BOS, EOS) as their text unless skipped, the rest through SentencePiece.
  std::string decode(const std::vector<int64_t>& ids,
                     bool skip_special_tokens = true) const override;
  int64_t vocab_size() const override;
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;
  std::string description() const override;

 private:
  /// The ids of `text` without BOS/EOS.
  std::vector<int64_t> encode_sequence(const std::string& text) const;
  /// BOS and EOS around `ids`, as the config asks.
  void add_special(std::vector<int64_t>& ids) const;

  std::string file_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  bool add_bos_ = true, add_eos_ = false;
};

}  // namespace bigbatch::text
