#include "bigbatch/text/json_fields.h"

#include <fstream>
#include <sstream>

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BB_CHECK_INPUT(in, path, ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  BB_CHECK_INPUT(!in.bad(), path, ": cannot be read");
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(cat(path, ": not valid JSON (", e.what(), ")"));
  }
}

void check_list(const nlohmann::json& j, const JsonPlace& place) {
  BB_CHECK_INPUT(j.is_array(), place.str(), ": expected a list, got ", j.type_name());
}

JsonPlace JsonPlace::at(const std::string& key) const {
  return {file, path.empty() ? key : path + "." + key};
}

JsonPlace JsonPlace::at(std::size_t index) const {
  return {file, cat(path, "[", index, "]")};
}

std::string JsonPlace::str() const {
  return path.empty() ? file : cat(file, " (", path, ")");
}

const nlohmann::json& member(const nlohmann::json& j, const std::string& key,
                             const JsonPlace& place) {
  BB_CHECK_INPUT(j.is_object(), place.str(), ": expected an object, got ", j.type_name());
  const auto it = j.find(key);
  BB_CHECK_INPUT(it != j.end(), place.str(), ": \"", key, "\" is missing");
  return *it;
}

std::string string_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place) {
  const nlohmann::json& value = member(j, key, place);
  BB_CHECK_INPUT(value.is_string(), place.at(key).str(), ": expected a string, got ", value.dump());
  return value.get<std::string>();
}

std::optional<std::string> optional_string(const nlohmann::json& j, const std::string& key,
                                           const JsonPlace& place) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return std::nullopt;
  BB_CHECK_INPUT(it->is_string(), place.at(key).str(), ": expected a string or null, got ",
                 it->dump());
  return it->get<std::string>();
}

char32_t char_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place) {
  const std::string text = string_member(j, key, place);
  check_utf8(text, place.at(key).str());
  char32_t cp = 0;
  BB_CHECK_INPUT(!text.empty() && next_code_point(text, 0, cp) == text.size(), place.at(key).str(),
                 ": expected one character, got \"", text, "\"");
  return cp;
}

bool bool_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place,
                 bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return fallback;
  BB_CHECK_INPUT(it->is_boolean(), place.at(key).str(), ": expected true or false, got ",
                 it->dump());
  return it->get<bool>();
}

int64_t int_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place,
                   int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return fallback;
  BB_CHECK_INPUT(it->is_number_integer(), place.at(key).str(), ": expected an integer, got ",
                 it->dump());
  return it->get<int64_t>();
}

std::string type_of(const nlohmann::json& j, const std::string& kind, const JsonPlace& place) {
  BB_CHECK_INPUT(j.is_object(), place.str(), ": expected a ", kind, " object, got ", j.dump());
  return string_member(j, "type", place);
}

void unsupported_type(const std::string& kind, const std::string& type, const JsonPlace& place,
                      const std::string& supported) {
  throw InputError(cat(place.str(), ": ", kind, " type \"", type,
                       "\" is not supported (supported: ", supported, ")"));
}

}  // namespace bigbatch::text
