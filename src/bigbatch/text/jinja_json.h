// JSON in and out of template values: the variables a template renders with, and the `tojson`
// filter as transformers defines it (json.dumps with ensure_ascii=False).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "bigbatch/text/jinja_value.h"

namespace bigbatch::text::jinja {

/// The template value of `json` (objects keep the order of the json type: sorted for
/// nlohmann::json, insertion order for nlohmann::ordered_json). Throws Error (ValueError) for an
/// unsigned integer beyond int64.
Value from_json(const nlohmann::json& json);
Value from_json(const nlohmann::ordered_json& json);

/// Options of json.dumps that transformers' tojson exposes.
struct JsonFormat {
  std::optional<std::string> indent;  ///< None, or the text of one level of indentation
  std::string item_separator = ", ";  ///< ", " (or "," when indenting) unless separators given
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  ///< escape non-ASCII characters as \uXXXX
};

/// json.dumps(value, ensure_ascii=False, ...) of `value`. Throws Error (TypeError) for what
/// json.dumps cannot serialize (Undefined, a namespace, an iterator, a non-scalar dict key).
std::string to_json(const Value& value, const JsonFormat& format);

}  // namespace bigbatch::text::jinja
