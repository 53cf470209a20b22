// tokenizer.json's "model": words to ids (BPE, WordPiece, Unigram), and the vocabulary they share.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"

namespace bigbatch::text {

/// Token <-> id of a model's "vocab" object.
struct Vocab {
  std::unordered_map<std::string, int64_t> ids;  ///< token -> id
  std::vector<std::string> tokens;               ///< id -> token ("" where no token has the id)
  /// Reads {"token": id, ...}; throws InputError naming `place` for a negative or repeated id.
  static Vocab from_json(const nlohmann::json& j, const JsonPlace& place);
  /// The id of `token`, if it has one.
  std::optional<int64_t> find(const std::string& token) const;
};

/// The ids of the byte pieces "<0x00>" .. "<0xFF>" of `vocab` (byte fallback), -1 where absent.
std::array<int64_t, 256> byte_piece_ids(const Vocab& vocab);

/// Turns one pre-tokenized word into ids.
class Model {
 public:
  virtual ~Model() = default;
  /// Appends the ids of `word` to `out`.
  virtual void tokenize(const std::string& word, std::vector<int64_t>& out) const = 0;
  /// The model's vocabulary.
  virtual const Vocab& vocab() const = 0;
  /// "BPE", "WordPiece" or "Unigram".
  virtual std::string name() const = 0;
};

/// The model a tokenizer.json "model" object describes. Throws InputError naming the place and
/// the supported types for an unknown "type", and for settings bigbatch does not implement.
std::unique_ptr<Model> make_model(const nlohmann::json& j, const JsonPlace& place);

}  // namespace bigbatch::text
