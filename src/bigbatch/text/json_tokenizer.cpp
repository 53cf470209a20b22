#include "bigbatch/text/json_tokenizer.h"

#include "bigbatch/core/check.h"
#include "bigbatch/text/json_fields.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

JsonTokenizer::JsonTokenizer(const std::string& directory) : file_(directory + "/tokenizer.json") {
  const nlohmann::json j = read_json_file(file_);
  const JsonPlace top{file_, ""};
  BB_CHECK_INPUT(j.is_object(), file_, ": expected a JSON object, got ", j.type_name());
  const auto section = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json null;
    const auto it = j.find(key);
    return it == j.end() ? null : *it;
  };
  normalizer_ = make_normalizer(section("normalizer"), top.at("normalizer"));
  pre_tokenizer_ = make_pre_tokenizer(section("pre_tokenizer"), top.at("pre_tokenizer"));
  model_ = make_model(member(j, "model", top), top.at("model"));
  post_processor_ = make_post_processor(section("post_processor"), top.at("post_processor"));
  decoder_ = make_decoder(section("decoder"), top.at("decoder"));
  added_ = AddedVocabulary(section("added_tokens"), top.at("added_tokens"), normalizer_.get());
  read_special_tokens(directory);
}

std::vector<int64_t> JsonTokenizer::encode_sequence(const std::string& text) const {
  check_utf8(text, "the text to encode");
  std::vector<Piece> pieces;
  if (!text.empty())
    pieces.push_back({text, true, std::nullopt});
  added_.split(pieces, false);
  for (Piece& piece : pieces)
    if (!piece.token && normalizer_)
      piece.text = normalizer_->normalize(piece.text);
  added_.split(pieces, true);
  std::vector<int64_t> ids;
  std::vector<Piece> words;
  for (const Piece& piece : pieces) {
    if (piece.token) {
      ids.push_back(*piece.token);
      continue;
    }
    if (piece.text.empty())
      continue;
    words.clear();
    if (pre_tokenizer_)
      pre_tokenizer_->split(piece, words);
    else
      words.push_back(piece);
    for (const Piece& word : words)
      model_->tokenize(word.text, ids);
  }
  return ids;
}

std::vector<int64_t> JsonTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int64_t> ids = encode_sequence(text);
  if (!add_special_tokens || !post_processor_)
    return ids;
  std::vector<int64_t> out;
  for (const auto& part : post_processor_->process({std::move(ids)}))
    out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::vector<int64_t> JsonTokenizer::encode_pair(const std::string& first, const std::string& second,
                                                bool add_special_tokens) const {
  std::vector<std::vector<int64_t>> sequences{encode_sequence(first), encode_sequence(second)};
  if (add_special_tokens && post_processor_)
    sequences = post_processor_->process(std::move(sequences));
  std::vector<int64_t> out;
  for (const auto& part : sequences)
    out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::string JsonTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    const AddedToken* added = added_.find(id);
    if (added && added->special && skip_special_tokens)
      continue;
    tokens.push_back(added ? added->content : id_to_token(id));
  }
  if (decoder_)
    tokens = decoder_->decode_chain(std::move(tokens));
  else if (!tokens.empty())
    for (std::size_t i = 1; i < tokens.size(); ++i)
      tokens[i] = " " + tokens[i];
  std::string text;
  for (const std::string& t : tokens)
    text += t;
  return text;
}

int64_t JsonTokenizer::vocab_size() const {
  return std::max<int64_t>(static_cast<int64_t>(model_->vocab().tokens.size()), added_.end_id());
}

std::optional<int64_t> JsonTokenizer::token_to_id(const std::string& token) const {
  if (const auto id = added_.token_to_id(token))
    return id;
  return model_->vocab().find(token);
}

std::string JsonTokenizer::id_to_token(int64_t id) const {
  if (const AddedToken* added = added_.find(id))
    return added->content;
  const auto& tokens = model_->vocab().tokens;
  BB_CHECK_INPUT(id >= 0 && id < static_cast<int64_t>(tokens.size()) && !tokens[id].empty(),
                 "token id ", id, " is out of range for ", file_, " (", vocab_size(), " ids)");
  return tokens[id];
}

std::string JsonTokenizer::description() const {
  return cat(model_->name(), ", ", vocab_size(), " tokens (tokenizer.json)");
}

}  // namespace bigbatch::text
