// tokenizer.json's "post_processor": the special tokens put around the ids of a text.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"

namespace bigbatch::text {

/// Adds special tokens (when encode is asked for them).
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /// The ids of one sequence, or of a pair, with the special tokens: as many sequences as came
  /// in, or one when the processor joined them (tokenizers' process_encodings).
  virtual std::vector<std::vector<int64_t>> process(
      std::vector<std::vector<int64_t>> sequences) const = 0;
};

/// The post-processor a tokenizer.json "post_processor" object describes; nullptr for JSON null.
/// Throws InputError naming the place and the supported types for an unknown "type".
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const JsonPlace& place);

}  // namespace bigbatch::text
