// tokenizer.json's "decoder": tokens back to text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"

namespace bigbatch::text {

/// Turns tokens back into text, step by step (tokenizers' decode_chain): each decoder maps the
/// list of token strings to a new list; the text is their concatenation.
class Decoder {
 public:
  virtual ~Decoder() = default;
  /// The tokens after this decoder.
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

/// The decoder a tokenizer.json "decoder" object describes; nullptr for JSON null. Throws
/// InputError naming the place and the supported types for an unknown "type".
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const JsonPlace& place);

}  // namespace bigbatch::text
