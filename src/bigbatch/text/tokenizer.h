// Hugging Face tokenizers in C++: a model directory's tokenizer.json (or SentencePiece
// tokenizer.model), giving the ids Python's `tokenizers` / transformers give.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bigbatch::text {

/// Ids of the special tokens a tokenizer defines (from tokenizer_config.json /
/// special_tokens_map.json / tokenizer.json added_tokens); absent ones are std::nullopt.
struct SpecialTokens {
  std::optional<int64_t> bos, eos, pad, unk, cls, sep, mask;
};

/// Text to ids and back, as the Hugging Face tokenizer of a model directory does it.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Ids of `text` as HF `tokenizer(text, add_special_tokens=...)["input_ids"]` gives them
  /// (no truncation, no padding: tokenizer.json's own truncation/padding sections are ignored,
  /// the data pipeline decides the length). Throws InputError if `text` is not valid UTF-8.
  virtual std::vector<int64_t> encode(const std::string& text,
                                      bool add_special_tokens = true) const = 0;
  /// Ids of the pair (`first`, `second`) as HF `tokenizer(first, second)["input_ids"]` gives
  /// them (BERT: [CLS] first [SEP] second [SEP]).
  virtual std::vector<int64_t> encode_pair(const std::string& first, const std::string& second,
                                           bool add_special_tokens = true) const = 0;
  /// Text of `ids` as HF decode(ids, skip_special_tokens=...) gives it (tokenizers' decode:
  /// without transformers' clean_up_tokenization_spaces). Throws InputError for an id out of
  /// range.
  virtual std::string decode(const std::vector<int64_t>& ids,
                             bool skip_special_tokens = true) const = 0;
  /// Number of ids (vocabulary plus added tokens), i.e. the largest id + 1.
  virtual int64_t vocab_size() const = 0;
  /// The id of `token` (a vocabulary entry or an added token), if it has one.
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
  /// The token of `id`; throws InputError for an id out of range.
  virtual std::string id_to_token(int64_t id) const = 0;
  /// The special tokens' ids.
  const SpecialTokens& special_tokens() const { return special_tokens_; }
  /// One line for the plan table, e.g. "WordPiece, 30522 tokens (tokenizer.json)".
  virtual std::string description() const = 0;

 protected:
  /// Reads the special tokens of `directory`'s tokenizer_config.json and special_tokens_map.json
  /// (their bos_token, eos_token, ... as strings or {"content": ...}) and looks up their ids;
  /// a token named there that this tokenizer lacks stays std::nullopt. Call it from the
  /// constructor of a subclass, once it can answer token_to_id.
  void read_special_tokens(const std::string& directory);

 private:
  SpecialTokens special_tokens_;
};

/// The tokenizer of a model directory: tokenizer.json when present, else tokenizer.model
/// (SentencePiece, through libsentencepiece). Throws bigbatch::InputError (core/check.h) naming
/// the file and what is wrong: no tokenizer file, unreadable/corrupt JSON, an unknown model /
/// normalizer / pre-tokenizer / post-processor / decoder "type" (naming it and listing the
/// supported ones), a bad merges entry, ...
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& directory);

/// The chat template of tokenizer_config.json ("chat_template"; or chat_template.jinja beside
/// it), empty when it has none.
std::string chat_template(const std::string& directory);

}  // namespace bigbatch::text
