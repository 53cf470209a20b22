#include "bigbatch/io/hf_config.h"

#include <filesystem>
#include <stdexcept>

#include "bigbatch/core/check.h"
#include "bigbatch/io/read_file.h"

namespace bigbatch::io {

HfConfig HfConfig::read(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "config.json").string();
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::runtime_error& error) {
    const std::filesystem::path run_config = std::filesystem::path(directory) / "config.toml";
    if (std::filesystem::exists(run_config) &&
        std::filesystem::is_directory(std::filesystem::path(directory) / "checkpoints")) {
      throw InputError(cat(directory,
                           " is a bigbatch run directory, not a Hugging Face model "
                           "directory (which holds config.json); `bigbatch export ",
                           directory, " --out PATH` writes its model to give here"));
    }
    throw InputError(cat(error.what(), " (a Hugging Face model directory holds config.json)"));
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(cat(path, ": not valid JSON: ", error.what()));
  }
  return HfConfig(std::move(json), path);
}

HfConfig::HfConfig(nlohmann::json json, std::string origin)
    : json_(std::move(json)), origin_(std::move(origin)) {
  BB_CHECK_INPUT(json_.is_object(), origin_, ": expected a JSON object, got ", json_.type_name());
}

const nlohmann::json* HfConfig::find(const std::string& key) {
  used_.insert(key);
  const auto found = json_.find(key);
  return found == json_.end() || found->is_null() ? nullptr : &*found;
}

int64_t HfConfig::get_int(const std::string& key) {
  const nlohmann::json* value = find(key);
  BB_CHECK_INPUT(value != nullptr, origin_, ": missing field \"", key, "\" (an integer)");
  BB_CHECK_INPUT(value->is_number_integer(), origin_, ": \"", key, "\" must be an integer, got ",
                 value->dump());
  return value->get<int64_t>();
}

int64_t HfConfig::get_int(const std::string& key, int64_t fallback) {
  return has(key) ? get_int(key) : fallback;
}

double HfConfig::get_double(const std::string& key, double fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr)
    return fallback;
  BB_CHECK_INPUT(value->is_number(), origin_, ": \"", key, "\" must be a number, got ",
                 value->dump());
  return value->get<double>();
}

bool HfConfig::get_bool(const std::string& key, bool fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr)
    return fallback;
  BB_CHECK_INPUT(value->is_boolean(), origin_, ": \"", key, "\" must be true or false, got ",
                 value->dump());
  return value->get<bool>();
}

std::string HfConfig::get_string(const std::string& key, const std::string& fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr)
    return fallback;
  BB_CHECK_INPUT(value->is_string(), origin_, ": \"", key, "\" must be a string, got ",
                 value->dump());
  return value->get<std::string>();
}

nlohmann::json HfConfig::get_json(const std::string& key) {
  const nlohmann::json* value = find(key);
  return value == nullptr ? nlohmann::json(nullptr) : *value;
}

bool HfConfig::has(const std::string& key) {
  return find(key) != nullptr;
}

void HfConfig::require(const std::string& key, const nlohmann::json& supported) {
  const nlohmann::json* value = find(key);
  BB_CHECK_INPUT(value == nullptr || *value == supported, origin_, ": unsupported \"", key,
                 "\": ", value ? value->dump() : "", " (bigbatch supports only ", supported.dump(),
                 ")");
}

std::string HfConfig::model_type(const std::vector<std::string>& supported) {
  const nlohmann::json* value = find("model_type");
  const std::string type = value != nullptr && value->is_string() ? value->get<std::string>() : "";
  std::string names;
  for (const std::string& name : supported) {
    if (type == name)
      return type;
    names += cat(names.empty() ? "" : ", ", "\"", name, "\"");
  }
  const std::string expected = cat(supported.size() > 1 ? "one of " : "", names);
  BB_CHECK_INPUT(value != nullptr, origin_, ": missing field \"model_type\" (expected ", expected,
                 ")");
  throw InputError(cat(origin_, ": model_type ", value->dump(), " is not ", expected));
}

void HfConfig::ignore_metadata() {
  ignore({"architectures", "transformers_version", "dtype", "torch_dtype", "_name_or_path",
          "bos_token_id", "eos_token_id", "pad_token_id", "use_cache"});
}

void HfConfig::ignore(std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    used_.insert(key);
}

void HfConfig::finish(const std::string& what) const {
  std::string unknown;
  for (const auto& [key, value] : json_.items()) {
    if (used_.count(key) == 0)
      unknown += cat(unknown.empty() ? "" : ", ", "\"", key, "\" = ", value.dump());
  }
  BB_CHECK_INPUT(unknown.empty(), origin_, ": unsupported field(s) for ", what, ": ", unknown,
                 " (docs/PRETRAINED.md lists the supported ones)");
}

}  // namespace bigbatch::io
