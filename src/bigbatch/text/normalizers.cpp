#include "bigbatch/text/normalizers.h"

#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/text/pattern.h"
#include "bigbatch/text/precompiled.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

const char* const kSupportedNormalizers =
    "BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Prepend, Replace, Strip, "
    "Precompiled, Sequence";

namespace {

/// Keeps the code points `keep` accepts, each replaced by what `map` gives.
template <typename Keep, typename Map>
std::string filter_map(const std::string& text, Keep keep, Map map) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const std::size_t n = next_code_point(text, pos, cp);
    if (keep(cp))
      append_utf8(out, map(cp));
    pos += n;
  }
  return out;
}

std::string strip_nonspacing_marks(const std::string& text) {
  return filter_map(
      normalize(text, NormalForm::kNFD), [](char32_t cp) { return !is_nonspacing_mark(cp); },
      [](char32_t cp) { return cp; });
}

/// BERT's normalizer (tokenizers' BertNormalizer).
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}
  std::string normalize(const std::string& text) const override {
    std::string s = text;
    if (clean_text_) {
      // Drops NUL, U+FFFD and other/control characters; every whitespace becomes a space.
      s = filter_map(
          s,
          [](char32_t cp) {
            const bool control = cp != '\t' && cp != '\n' && cp != '\r' && is_other(cp);
            return !(cp == 0 || cp == 0xFFFD || control);
          },
          [](char32_t cp) {
            return cp == '\t' || cp == '\n' || cp == '\r' || is_whitespace(cp) ? U' ' : cp;
          });
    }
    if (chinese_) {
      std::string spaced;
      for (std::size_t pos = 0; pos < s.size();) {
        char32_t cp;
        const std::size_t n = next_code_point(s, pos, cp);
        if (is_chinese_char(cp)) {
          spaced += ' ';
          spaced.append(s, pos, n);
          spaced += ' ';
        } else {
          spaced.append(s, pos, n);
        }
        pos += n;
      }
      s = std::move(spaced);
    }
    if (strip_accents_)
      s = strip_nonspacing_marks(s);
    if (lowercase_)
      s = lowercase(s);
    return s;
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(const std::string& text) const override {
    return text::normalize(text, form_);
  }

 private:
  NormalForm form_;
};

class Lowercase : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override { return lowercase(text); }
};

/// Removes combining marks (does not decompose first: tokenizers' StripAccents).
class StripAccents : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override {
    return filter_map(
        text, [](char32_t cp) { return !is_mark(cp); }, [](char32_t cp) { return cp; });
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(const std::string& text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(const std::string& text) const override {
    return pattern_.replace_all(text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

/// Strips whitespace on the left and/or right.
class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(const std::string& text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        char32_t cp;
        const std::size_t n = next_code_point(text, begin, cp);
        if (!is_whitespace(cp))
          break;
        begin += n;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
          --start;
        char32_t cp;
        next_code_point(text, start, cp);
        if (!is_whitespace(cp))
          break;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(const std::string& text) const override {
    std::string s = text;
    for (const auto& part : parts_)
      s = part->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null())
    return nullptr;
  const std::string type = type_of(j, "normalizer", place);
  if (type == "BertNormalizer") {
    const bool lower = bool_member(j, "lowercase", place, true);
    // strip_accents null follows lowercase, as in tokenizers.
    const bool strip = bool_member(j, "strip_accents", place, lower);
    return std::make_unique<BertNormalizer>(bool_member(j, "clean_text", place, true),
                                            bool_member(j, "handle_chinese_chars", place, true),
                                            strip, lower);
  }
  if (type == "NFC")
    return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFD")
    return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKC")
    return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  if (type == "Lowercase")
    return std::make_unique<Lowercase>();
  if (type == "StripAccents")
    return std::make_unique<StripAccents>();
  if (type == "Prepend")
    return std::make_unique<Prepend>(string_member(j, "prepend", place));
  if (type == "Replace")
    return std::make_unique<Replace>(Pattern(member(j, "pattern", place), place.at("pattern")),
                                     string_member(j, "content", place));
  if (type == "Strip")
    return std::make_unique<Strip>(bool_member(j, "strip_left", place, true),
                                   bool_member(j, "strip_right", place, true));
  if (type == "Precompiled")
    return std::make_unique<PrecompiledNormalizer>(j, place);
  if (type == "Sequence") {
    auto parts = component_list<Normalizer>(j, "normalizers", place, make_normalizer);
    return std::make_unique<Sequence>(std::move(parts));
  }
  unsupported_type("normalizer", type, place, kSupportedNormalizers);
}

}  // namespace bigbatch::text
