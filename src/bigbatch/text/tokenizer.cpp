#include "bigbatch/text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bigbatch/core/check.h"
#include "bigbatch/text/json_fields.h"
#include "bigbatch/text/json_tokenizer.h"
#include "bigbatch/text/sentencepiece_tokenizer.h"

namespace bigbatch::text {
namespace {

namespace fs = std::filesystem;

/// The token a config names under `key`: a string or {"content": ...}; nullopt when absent.
std::optional<std::string> named_token(const nlohmann::json& config, const std::string& key,
                                       const JsonPlace& place) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null())
    return std::nullopt;
  if (it->is_object())
    return string_member(*it, "content", place.at(key));
  BB_CHECK_INPUT(it->is_string(), place.at(key).str(),
                 ": expected a token (a string or {\"content\": ...}), got ", it->dump());
  return it->get<std::string>();
}

}  // namespace

void Tokenizer::read_special_tokens(const std::string& directory) {
  std::vector<std::pair<nlohmann::json, JsonPlace>> configs;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = directory + "/" + name;
    if (fs::exists(path))
      configs.emplace_back(read_json_file(path), JsonPlace{path, ""});
  }
  const auto lookup = [&](const std::string& key) -> std::optional<int64_t> {
    for (const auto& [config, place] : configs) {
      if (!config.is_object())
        continue;
      if (const auto token = named_token(config, key, place))
        return token_to_id(*token);
    }
    return std::nullopt;
  };
  special_tokens_.bos = lookup("bos_token");
  special_tokens_.eos = lookup("eos_token");
  special_tokens_.pad = lookup("pad_token");
  special_tokens_.unk = lookup("unk_token");
  special_tokens_.cls = lookup("cls_token");
  special_tokens_.sep = lookup("sep_token");
  special_tokens_.mask = lookup("mask_token");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& directory) {
  BB_CHECK_INPUT(fs::is_directory(directory), directory, ": no such directory");
  if (fs::exists(directory + "/tokenizer.json"))
    return std::make_unique<JsonTokenizer>(directory);
  if (fs::exists(directory + "/tokenizer.model"))
    return std::make_unique<SentencePieceTokenizer>(directory);
  throw InputError(cat(directory,
                       ": no tokenizer (expected tokenizer.json, or a SentencePiece "
                       "tokenizer.model)"));
}

std::string chat_template(const std::string& directory) {
  const std::string path = directory + "/tokenizer_config.json";
  if (fs::exists(path)) {
    const nlohmann::json config = read_json_file(path);
    const JsonPlace top{path, ""};
    const auto it = config.is_object() ? config.find("chat_template") : config.end();
    if (config.is_object() && it != config.end() && !it->is_null()) {
      if (it->is_string())
        return it->get<std::string>();
      // A list of named templates: the one named "default".
      BB_CHECK_INPUT(it->is_array(), top.at("chat_template").str(),
                     ": expected a string or a list of {name, template}");
      for (std::size_t i = 0; i < it->size(); ++i) {
        const JsonPlace at = top.at("chat_template").at(i);
        if (string_member((*it)[i], "name", at) == "default")
          return string_member((*it)[i], "template", at);
      }
      return "";
    }
  }
  std::ifstream jinja(directory + "/chat_template.jinja", std::ios::binary);
  if (!jinja)
    return "";
  std::ostringstream text;
  text << jinja.rdbuf();
  return text.str();
}

}  // namespace bigbatch::text
