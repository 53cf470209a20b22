// tokenizer.json's "normalizer": what is done to the text before it is split.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"

namespace bigbatch::text {

/// Changes text before pre-tokenization (lowercase, Unicode forms, replacements).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// The normalized `text` (valid UTF-8 in, valid UTF-8 out).
  virtual std::string normalize(const std::string& text) const = 0;
};

/// The normalizer a tokenizer.json "normalizer" object describes; nullptr for JSON null. Throws
/// InputError naming the place and the supported types for an unknown "type".
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const JsonPlace& place);

/// The normalizer types make_normalizer supports, for messages.
extern const char* const kSupportedNormalizers;

}  // namespace bigbatch::text
