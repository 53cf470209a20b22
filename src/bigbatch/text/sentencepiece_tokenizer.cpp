#include "bigbatch/text/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>

#include "bigbatch/core/check.h"
#include "bigbatch/text/json_fields.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& directory)
    : file_(directory + "/tokenizer.model"),
      processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = processor_->Load(file_);
  BB_CHECK_INPUT(status.ok(), file_, ": not a SentencePiece model (", status.ToString(), ")");
  const std::string config_file = directory + "/tokenizer_config.json";
  if (std::ifstream(config_file)) {
    const nlohmann::json config = read_json_file(config_file);
    const JsonPlace top{config_file, ""};
    add_bos_ = bool_member(config, "add_bos_token", top, true);
    add_eos_ = bool_member(config, "add_eos_token", top, false);
  }
  read_special_tokens(directory);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int64_t> SentencePieceTokenizer::encode_sequence(const std::string& text) const {
  check_utf8(text, "the text to encode");
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  BB_CHECK_INPUT(status.ok(), file_, ": encoding failed (", status.ToString(), ")");
  return std::vector<int64_t>(ids.begin(), ids.end());
}

void SentencePieceTokenizer::add_special(std::vector<int64_t>& ids) const {
  if (add_bos_ && processor_->bos_id() >= 0)
    ids.insert(ids.begin(), processor_->bos_id());
  if (add_eos_ && processor_->eos_id() >= 0)
    ids.push_back(processor_->eos_id());
}

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& text,
                                                    bool add_special_tokens) const {
  std::vector<int64_t> ids = encode_sequence(text);
  if (add_special_tokens)
    add_special(ids);
  return ids;
}

std::vector<int64_t> SentencePieceTokenizer::encode_pair(const std::string& first,
                                                         const std::string& second,
                                                         bool add_special_tokens) const {
  std::vector<int64_t> a = encode(first, add_special_tokens);
  const std::vector<int64_t> b = encode(second, add_special_tokens);
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids,
                                           bool skip_special_tokens) const {
  std::string text;
  std::vector<int> run;
  const auto flush = [&] {
    if (run.empty())
      return;
    std::string piece;
    const auto status = processor_->Decode(run, &piece);
    BB_CHECK_INPUT(status.ok(), file_, ": decoding failed (", status.ToString(), ")");
    text += piece;
    run.clear();
  };
  for (int64_t id : ids) {
    id_to_token(id);  // checks the range
    const int i = static_cast<int>(id);
    if (processor_->IsControl(i)) {
      flush();
      if (!skip_special_tokens)
        text += processor_->IdToPiece(i);
    } else {
      run.push_back(i);
    }
  }
  flush();
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return processor_->GetPieceSize();
}

std::optional<int64_t> SentencePieceTokenizer::token_to_id(const std::string& token) const {
  const int id = processor_->PieceToId(token);  // the unknown id for a piece it lacks
  if (id < 0 || processor_->IdToPiece(id) != token)
    return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::id_to_token(int64_t id) const {
  BB_CHECK_INPUT(id >= 0 && id < vocab_size(), "token id ", id, " is out of range for ", file_,
                 " (", vocab_size(), " ids)");
  return processor_->IdToPiece(static_cast<int>(id));
}

std::string SentencePieceTokenizer::description() const {
  return cat("SentencePiece, ", vocab_size(), " tokens (tokenizer.model)");
}

}  // namespace bigbatch::text
