// Reading tokenizer.json and tokenizer_config.json field by field, with errors that name the file,
// the place in it and what was expected.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bigbatch::text {

/// The JSON document in file `path`; throws InputError naming the file if it cannot be read or
/// is not valid JSON (with the parser's message).
nlohmann::json read_json_file(const std::string& path);

/// A place in a JSON file, for error messages: `tokenizer.json (normalizer.normalizers[1])`.
struct JsonPlace {
  std::string file;  ///< the file's path
  std::string path;  ///< dotted path in it, empty for the top level
  /// The place of member `key`.
  JsonPlace at(const std::string& key) const;
  /// The place of element `index`.
  JsonPlace at(std::size_t index) const;
  /// "file (path)" or "file".
  std::string str() const;
};

/// Member `key` of the object `j`; throws InputError naming the place if it is absent.
const nlohmann::json& member(const nlohmann::json& j, const std::string& key,
                             const JsonPlace& place);
/// Member `key` as a string (required).
std::string string_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place);
/// Member `key` as a string; std::nullopt when absent or null.
std::optional<std::string> optional_string(const nlohmann::json& j, const std::string& key,
                                           const JsonPlace& place);
/// Member `key` as a string of exactly one character (a code point), required.
char32_t char_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place);
/// Member `key` as a bool; `fallback` when absent or null.
bool bool_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place,
                 bool fallback);
/// Member `key` as an integer; `fallback` when absent or null.
int64_t int_member(const nlohmann::json& j, const std::string& key, const JsonPlace& place,
                   int64_t fallback);
/// The "type" member of a component object (`kind` names it: "normalizer", "decoder", ...).
std::string type_of(const nlohmann::json& j, const std::string& kind, const JsonPlace& place);
/// Throws InputError: `kind` type `type` at `place` is not supported, listing `supported`.
[[noreturn]] void unsupported_type(const std::string& kind, const std::string& type,
                                   const JsonPlace& place, const std::string& supported);

/// Throws InputError naming `place` unless `j` is a list.
void check_list(const nlohmann::json& j, const JsonPlace& place);

/// The components listed in member `key` (a JSON list) of a Sequence component, each made by
/// `make(element, place)`; JSON nulls (make returns nullptr) are left out.
template <typename T, typename Make>
std::vector<std::unique_ptr<T>> component_list(const nlohmann::json& j, const std::string& key,
                                               const JsonPlace& place, Make make) {
  const nlohmann::json& list = member(j, key, place);
  check_list(list, place.at(key));
  std::vector<std::unique_ptr<T>> parts;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto part = make(list[i], place.at(key).at(i));
    if (part)
      parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace bigbatch::text
