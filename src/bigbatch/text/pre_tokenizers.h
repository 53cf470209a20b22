// tokenizer.json's "pre_tokenizer": how normalized text is split into words before the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bigbatch/text/json_fields.h"

namespace bigbatch::text {

/// A piece of the text on its way through the pipeline: its (normalized) text, whether it
/// begins at the start of the original text, and the id when it is an added token.
struct Piece {
  std::string text;              ///< UTF-8
  bool at_origin = false;        ///< starts at byte 0 of the text given to encode
  std::optional<int64_t> token;  ///< set for an added token: the model never sees it
};

/// A byte span [first, second) of a text.
using Span = std::pair<std::size_t, std::size_t>;

/// What happens to a delimiter a split finds (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// The spans of a text of `length` bytes split at `matches` (sorted, non-overlapping) under
/// `behavior`; with `invert` the non-matches are the delimiters. Empty spans are left out.
std::vector<Span> split_spans(std::size_t length, const std::vector<Span>& matches,
                              SplitBehavior behavior, bool invert = false);

/// Splits a piece into the pieces the model tokenizes one by one.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Appends the pieces `piece` splits into to `out`.
  virtual void split(const Piece& piece, std::vector<Piece>& out) const = 0;
};

/// The pre-tokenizer a tokenizer.json "pre_tokenizer" object describes; nullptr for JSON null.
/// Throws InputError naming the place and the supported types for an unknown "type".
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const JsonPlace& place);

/// The pre-tokenizer types make_pre_tokenizer supports, for messages.
extern const char* const kSupportedPreTokenizers;

/// GPT-2's byte-to-character table: the printable character that stands for each byte.
const std::vector<std::string>& byte_level_chars();

}  // namespace bigbatch::text
