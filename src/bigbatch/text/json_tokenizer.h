// The tokenizer a tokenizer.json describes: added tokens, normalizer, pre-tokenizer, model,
// post-processor and decoder, run as Hugging Face tokenizers runs them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bigbatch/text/added_tokens.h"
#include "bigbatch/text/decoders.h"
#include "bigbatch/text/model.h"
#include "bigbatch/text/normalizers.h"
#include "bigbatch/text/post_processors.h"
#include "bigbatch/text/pre_tokenizers.h"
#include "bigbatch/text/tokenizer.h"

namespace bigbatch::text {

/// A tokenizer.json tokenizer.
class JsonTokenizer : public Tokenizer {
 public:
  /// Reads `directory`/tokenizer.json (and the special tokens of its config files).
  explicit JsonTokenizer(const std::string& directory);
  std::vector<int64_t> encode(const std::string& text,
                              bool add_special_tokens = true) const override;
  std::vector<int64_t> encode_pair(const std::string& first, const std::string& second,
                                   bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids,
                     bool skip_special_tokens = true) const override;
  int64_t vocab_size() const override;
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;
  std::string description() const override;

 private:
  /// The ids of `text` without post-processing.
  std::vector<int64_t> encode_sequence(const std::string& text) const;

  std::string file_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
};

}  // namespace bigbatch::text
