#include "bigbatch/text/pre_tokenizers.h"

#include <algorithm>
#include <cctype>
#include <functional>

#include "bigbatch/core/check.h"
#include "bigbatch/text/pattern.h"
#include "bigbatch/text/regex.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

const char* const kSupportedPreTokenizers =
    "BertPreTokenizer, ByteLevel, Metaspace, Split, Whitespace, WhitespaceSplit, Punctuation, "
    "Digits, CharDelimiterSplit, Sequence";

std::vector<Span> split_spans(std::size_t length, const std::vector<Span>& matches,
                              SplitBehavior behavior, bool invert) {
  // Every byte of the text in one (span, is_match) entry, in order.
  std::vector<std::pair<Span, bool>> all;
  std::size_t done = 0;
  for (const Span& m : matches) {
    if (m.first > done)
      all.push_back({{done, m.first}, invert});
    all.push_back({m, !invert});
    done = m.second;
  }
  if (done < length)
    all.push_back({{done, length}, invert});
  std::vector<Span> spans;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [span, is_match] : all)
        if (!is_match)
          spans.push_back(span);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& entry : all)
        spans.push_back(entry.first);
      break;
    case SplitBehavior::kContiguous:
      for (const auto& [span, is_match] : all) {
        if (is_match && previous_match && !spans.empty())
          spans.back().second = span.second;
        else
          spans.push_back(span);
        previous_match = is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [span, is_match] : all) {
        if (is_match && !previous_match && !spans.empty())
          spans.back().second = span.second;
        else
          spans.push_back(span);
        previous_match = is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (it->second && !previous_match && !spans.empty())
          spans.back().first = it->first.first;
        else
          spans.push_back(it->first);
        previous_match = it->second;
      }
      std::reverse(spans.begin(), spans.end());
      break;
  }
  std::vector<Span> nonempty;
  for (const Span& s : spans)
    if (s.second > s.first)
      nonempty.push_back(s);
  return nonempty;
}

const std::vector<std::string>& byte_level_chars() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> chars(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      append_utf8(chars[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return chars;
  }();
  return table;
}

namespace {

/// Each code point for which `is_delimiter` holds, as a match of its own.
std::vector<Span> char_matches(const std::string& text,
                               const std::function<bool(char32_t)>& is_delimiter) {
  std::vector<Span> matches;
  for (std::size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const std::size_t n = next_code_point(text, pos, cp);
    if (is_delimiter(cp))
      matches.emplace_back(pos, pos + n);
    pos += n;
  }
  return matches;
}

/// Appends the pieces of `piece.text` (or of `text`, its rewritten form) cut at `spans`.
void emit(const Piece& piece, const std::string& text, const std::vector<Span>& spans,
          std::vector<Piece>& out) {
  for (const Span& s : spans)
    out.push_back(
        {text.substr(s.first, s.second - s.first), piece.at_origin && s.first == 0, std::nullopt});
}

bool is_bert_punctuation(char32_t cp) {
  return (cp < 0x80 && std::ispunct(static_cast<int>(cp))) || is_punctuation(cp);
}

SplitBehavior behavior_of(const std::string& name, const JsonPlace& place) {
  if (name == "Removed")
    return SplitBehavior::kRemoved;
  if (name == "Isolated")
    return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious")
    return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext")
    return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous")
    return SplitBehavior::kContiguous;
  throw InputError(cat(place.str(), ": unknown split behavior \"", name,
                       "\" (known: Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                       "Contiguous)"));
}

/// Splits at code points a predicate selects (BertPreTokenizer, Whitespace..., Digits).
class CharSplit : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> is_delimiter, SplitBehavior behavior)
      : is_delimiter_(std::move(is_delimiter)), behavior_(behavior) {}
  void split(const Piece& piece, std::vector<Piece>& out) const override {
    emit(piece, piece.text,
         split_spans(piece.text.size(), char_matches(piece.text, is_delimiter_), behavior_), out);
  }

 private:
  std::function<bool(char32_t)> is_delimiter_;
  SplitBehavior behavior_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(const Piece& piece, std::vector<Piece>& out) const override {
    std::vector<Piece> pieces{piece};
    for (const auto& part : parts_) {
      std::vector<Piece> next;
      for (const Piece& p : pieces)
        part->split(p, next);
      pieces = std::move(next);
    }
    for (Piece& p : pieces)
      out.push_back(std::move(p));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class BertPreTokenizer : public PreTokenizer {
 public:
  BertPreTokenizer()
      : whitespace_(is_whitespace, SplitBehavior::kRemoved),
        punctuation_(is_bert_punctuation, SplitBehavior::kIsolated) {}
  void split(const Piece& piece, std::vector<Piece>& out) const override {
    std::vector<Piece> words;
    whitespace_.split(piece, words);
    for (const Piece& word : words)
      punctuation_.split(word, out);
  }

 private:
  CharSplit whitespace_, punctuation_;
};

class Split : public PreTokenizer {
 public:
  Split(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(const Piece& piece, std::vector<Piece>& out) const override {
    emit(piece, piece.text,
         split_spans(piece.text.size(), pattern_.find_all(piece.text), behavior_, invert_), out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

/// GPT-2's split regex, which ByteLevel uses with use_regex.
const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/// Optionally a space in front, GPT-2's regex split, then every byte as its printable character.
class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const JsonPlace& place)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Regex, place.str()) : nullptr) {}
  void split(const Piece& piece, std::vector<Piece>& out) const override {
    std::string text = piece.text;
    if (add_prefix_space_ && (text.empty() || text[0] != ' '))
      text = " " + text;
    const std::vector<Span> spans =
        regex_ ? split_spans(text.size(), regex_->find_all(text), SplitBehavior::kIsolated)
               : std::vector<Span>{{0, text.size()}};
    const auto& chars = byte_level_chars();
    for (const Span& s : spans) {
      Piece p{std::string(), piece.at_origin && s.first == 0, std::nullopt};
      for (std::size_t i = s.first; i < s.second; ++i)
        p.text += chars[static_cast<unsigned char>(text[i])];
      out.push_back(std::move(p));
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

/// Spaces become the replacement character ("▁"), which may be prepended, and may start words.
class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(std::string replacement, Prepend prepend, bool split_words)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split_words) {}
  void split(const Piece& piece, std::vector<Piece>& out) const override {
    std::string text;
    for (char c : piece.text) {
      if (c == ' ')
        text += replacement_;
      else
        text += c;
    }
    const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts &&
        (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && piece.at_origin)))
      text = replacement_ + text;
    if (!split_) {
      out.push_back({text, piece.at_origin, std::nullopt});
      return;
    }
    std::vector<Span> matches;
    for (std::size_t at = text.find(replacement_); at != std::string::npos;
         at = text.find(replacement_, at + replacement_.size()))
      matches.emplace_back(at, at + replacement_.size());
    emit(piece, text, split_spans(text.size(), matches, SplitBehavior::kMergedWithNext), out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

Metaspace::Prepend prepend_scheme(const nlohmann::json& j, const JsonPlace& place) {
  const auto scheme = optional_string(j, "prepend_scheme", place);
  if (!scheme)
    return bool_member(j, "add_prefix_space", place, true) ? Metaspace::Prepend::kAlways
                                                           : Metaspace::Prepend::kNever;
  if (*scheme == "always")
    return Metaspace::Prepend::kAlways;
  if (*scheme == "first")
    return Metaspace::Prepend::kFirst;
  if (*scheme == "never")
    return Metaspace::Prepend::kNever;
  throw InputError(cat(place.at("prepend_scheme").str(), ": unknown prepend_scheme \"", *scheme,
                       "\" (known: always, first, never)"));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null())
    return nullptr;
  const std::string type = type_of(j, "pre-tokenizer", place);
  if (type == "BertPreTokenizer")
    return std::make_unique<BertPreTokenizer>();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(bool_member(j, "add_prefix_space", place, true),
                                       bool_member(j, "use_regex", place, true), place);
  if (type == "Metaspace") {
    std::string replacement;
    append_utf8(replacement, char_member(j, "replacement", place));
    return std::make_unique<Metaspace>(replacement, prepend_scheme(j, place),
                                       bool_member(j, "split", place, true));
  }
  if (type == "Split")
    return std::make_unique<Split>(
        Pattern(member(j, "pattern", place), place.at("pattern")),
        behavior_of(string_member(j, "behavior", place), place.at("behavior")),
        bool_member(j, "invert", place, false));
  if (type == "Whitespace") {
    // \w+|[^\w\s]+ kept, everything else (whitespace) removed.
    return std::make_unique<Split>(Pattern({{"Regex", "\\w+|[^\\w\\s]+"}}, place),
                                   SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit")
    return std::make_unique<CharSplit>(is_whitespace, SplitBehavior::kRemoved);
  if (type == "Punctuation") {
    const auto behavior = optional_string(j, "behavior", place);
    return std::make_unique<CharSplit>(
        is_bert_punctuation,
        behavior ? behavior_of(*behavior, place.at("behavior")) : SplitBehavior::kIsolated);
  }
  if (type == "Digits")
    return std::make_unique<CharSplit>(is_numeric, bool_member(j, "individual_digits", place, false)
                                                       ? SplitBehavior::kIsolated
                                                       : SplitBehavior::kContiguous);
  if (type == "CharDelimiterSplit") {
    const char32_t d = char_member(j, "delimiter", place);
    return std::make_unique<CharSplit>([d](char32_t cp) { return cp == d; },
                                       SplitBehavior::kRemoved);
  }
  if (type == "Sequence") {
    auto parts = component_list<PreTokenizer>(j, "pretokenizers", place, make_pre_tokenizer);
    return std::make_unique<Sequence>(std::move(parts));
  }
  unsupported_type("pre-tokenizer", type, place, kSupportedPreTokenizers);
}

}  // namespace bigbatch::text
