#include "bigbatch/text/model.h"

#include <cstdio>

#include "bigbatch/core/check.h"
#include "bigbatch/text/bpe.h"
#include "bigbatch/text/unigram.h"
#include "bigbatch/text/wordpiece.h"

namespace bigbatch::text {

Vocab Vocab::from_json(const nlohmann::json& j, const JsonPlace& place) {
  BB_CHECK_INPUT(j.is_object(), place.str(), ": expected an object of token: id, got ",
                 j.type_name());
  Vocab vocab;
  vocab.ids.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    BB_CHECK_INPUT(id.is_number_integer() && id.get<int64_t>() >= 0, place.str(), ": token \"",
                   token, "\" has id ", id.dump(), ", expected an integer >= 0");
    const auto value = id.get<int64_t>();
    BB_CHECK_INPUT(value < (int64_t{1} << 31), place.str(), ": token \"", token, "\" has id ",
                   value, ", too large");
    if (static_cast<std::size_t>(value) >= vocab.tokens.size())
      vocab.tokens.resize(value + 1);
    BB_CHECK_INPUT(vocab.tokens[value].empty(), place.str(), ": tokens \"", vocab.tokens[value],
                   "\" and \"", token, "\" have the same id ", value);
    vocab.tokens[value] = token;
    vocab.ids.emplace(token, value);
  }
  return vocab;
}

std::optional<int64_t> Vocab::find(const std::string& token) const {
  const auto it = ids.find(token);
  if (it == ids.end())
    return std::nullopt;
  return it->second;
}

std::array<int64_t, 256> byte_piece_ids(const Vocab& vocab) {
  std::array<int64_t, 256> ids;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    ids[b] = vocab.find(name).value_or(-1);
  }
  return ids;
}

std::unique_ptr<Model> make_model(const nlohmann::json& j, const JsonPlace& place) {
  // Older files have no "type" in the model: tokenizers then guesses from the fields.
  std::string type;
  if (j.is_object() && !j.contains("type"))
    type = j.contains("merges") ? "BPE" : j.contains("vocab") ? "WordPiece" : "";
  else
    type = type_of(j, "model", place);
  if (type == "BPE")
    return std::make_unique<Bpe>(j, place);
  if (type == "WordPiece")
    return std::make_unique<WordPiece>(j, place);
  if (type == "Unigram")
    return std::make_unique<Unigram>(j, place);
  unsupported_type("model", type, place, "BPE, WordPiece, Unigram");
}

}  // namespace bigbatch::text
