#include "bigbatch/text/decoders.h"

#include <unordered_map>

#include "bigbatch/core/check.h"
#include "bigbatch/text/pattern.h"
#include "bigbatch/text/pre_tokenizers.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {
namespace {

/// Every occurrence of `from` in `text` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// BERT's clean-up of spaces before punctuation and in contractions.
std::string cleanup(std::string s) {
  static const char* const kRules[][2] = {{" .", "."},     {" ?", "?"},           {" !", "!"},
                                          {" ,", ","},     {" ' ", "'"},          {" n't", "n't"},
                                          {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},
                                          {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& rule : kRules)
    s = replace_all(std::move(s), rule[0], rule[1]);
  return s;
}

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool clean) : prefix_(std::move(prefix)), clean_(clean) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i != 0) {
        if (tokens[i].compare(0, prefix_.size(), prefix_) == 0)
          tokens[i].erase(0, prefix_.size());
        else
          tokens[i] = " " + tokens[i];
      }
      if (clean_)
        tokens[i] = cleanup(std::move(tokens[i]));
    }
    return tokens;
  }

 private:
  std::string prefix_;
  bool clean_;
};

/// Printable characters back to bytes, then the bytes as UTF-8 (invalid ones as U+FFFD).
class ByteLevelDecoder : public Decoder {
 public:
  ByteLevelDecoder() {
    const auto& chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) {
      char32_t cp;
      next_code_point(chars[b], 0, cp);
      bytes_[cp] = static_cast<char>(b);
    }
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string mapped;
      bool all = true;
      for (std::size_t pos = 0; pos < token.size() && all;) {
        char32_t cp;
        pos += next_code_point(token, pos, cp);
        const auto it = bytes_.find(cp);
        all = it != bytes_.end();
        if (all)
          mapped += it->second;
      }
      bytes += all ? mapped : token;  // a token of other characters keeps its own bytes
    }
    return {utf8_lossy(bytes)};
  }

 private:
  std::unordered_map<char32_t, char> bytes_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] =
          replace_all(std::move(tokens[i]), replacement_, i == 0 && strip_first_ ? "" : " ");
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens)
      token = pattern_.replace_all(token, content_);
    return tokens;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

/// Runs of "<0xNN>" tokens become the text of their bytes (U+FFFD per byte if invalid).
class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    std::size_t count = 0;
    const auto flush = [&] {
      if (count == 0)
        return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (std::size_t i = 0; i < count; ++i)
          out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (std::string& token : tokens) {
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(token[3])) &&
          std::isxdigit(static_cast<unsigned char>(token[4]))) {
        bytes += static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16));
        ++count;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const std::string& token : tokens)
      all += token;
    return {all};
  }
};

/// Removes up to `start` leading and `stop` trailing `content` characters of every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::size_t> bounds;
      std::vector<char32_t> chars;
      for (std::size_t pos = 0; pos < token.size();) {
        char32_t cp;
        bounds.push_back(pos);
        pos += next_code_point(token, pos, cp);
        chars.push_back(cp);
      }
      bounds.push_back(token.size());
      std::size_t begin = 0, end = chars.size();
      while (begin < start_ && begin < chars.size() && chars[begin] == content_)
        ++begin;
      for (std::size_t i = 0; i < stop_ && end > 0 && chars[end - 1] == content_; ++i)
        --end;
      token = end > begin ? token.substr(bounds[begin], bounds[end] - bounds[begin]) : "";
    }
    return tokens;
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

/// The suffix marks the end of a word: a space between words, nothing at the end.
class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(std::move(tokens[i]), suffix_, i + 1 == tokens.size() ? "" : " ");
    return tokens;
  }

 private:
  std::string suffix_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& part : parts_)
      tokens = part->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null())
    return nullptr;
  const std::string type = type_of(j, "decoder", place);
  if (type == "WordPiece")
    return std::make_unique<WordPieceDecoder>(optional_string(j, "prefix", place).value_or("##"),
                                              bool_member(j, "cleanup", place, true));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    std::string replacement;
    append_utf8(replacement, char_member(j, "replacement", place));
    const auto scheme = optional_string(j, "prepend_scheme", place);
    const bool strip_first =
        scheme ? *scheme != "never" : bool_member(j, "add_prefix_space", place, true);
    return std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(
        Pattern(member(j, "pattern", place), place.at("pattern")),
        string_member(j, "content", place));
  if (type == "ByteFallback")
    return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse")
    return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const int64_t start = int_member(j, "start", place, 0), stop = int_member(j, "stop", place, 0);
    BB_CHECK_INPUT(start >= 0 && stop >= 0, place.str(), ": start and stop must be >= 0, got ",
                   start, " and ", stop);
    return std::make_unique<StripDecoder>(char_member(j, "content", place),
                                          static_cast<std::size_t>(start),
                                          static_cast<std::size_t>(stop));
  }
  if (type == "BPEDecoder")
    return std::make_unique<BpeDecoder>(optional_string(j, "suffix", place).value_or("</w>"));
  if (type == "Sequence") {
    auto parts = component_list<Decoder>(j, "decoders", place, make_decoder);
    return std::make_unique<Sequence>(std::move(parts));
  }
  unsupported_type("decoder", type, place,
                   "WordPiece, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, "
                   "BPEDecoder, Sequence");
}

}  // namespace bigbatch::text
