#include "bigbatch/text/added_tokens.h"

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {
namespace {

char32_t last_char(const std::string& text, std::size_t end) {
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
    --start;
  char32_t cp;
  next_code_point(text, start, cp);
  return cp;
}

bool is_word_char(char32_t cp) {
  return cp == '_' || is_alphanumeric(cp);
}

}  // namespace

AddedVocabulary::AddedVocabulary(const nlohmann::json& list, const JsonPlace& place,
                                 const Normalizer* normalizer) {
  if (list.is_null())
    return;
  BB_CHECK_INPUT(list.is_array(), place.str(), ": expected a list");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const JsonPlace at = place.at(i);
    const nlohmann::json& j = list[i];
    AddedToken t;
    t.id = int_member(j, "id", at, -1);
    BB_CHECK_INPUT(t.id >= 0, at.at("id").str(), ": expected an id >= 0");
    t.content = string_member(j, "content", at);
    check_utf8(t.content, at.at("content").str());
    BB_CHECK_INPUT(!t.content.empty(), at.at("content").str(), ": an added token is empty");
    t.special = bool_member(j, "special", at, false);
    t.lstrip = bool_member(j, "lstrip", at, false);
    t.rstrip = bool_member(j, "rstrip", at, false);
    t.single_word = bool_member(j, "single_word", at, false);
    t.normalized = bool_member(j, "normalized", at, !t.special);
    std::string pattern = t.content;
    if (t.normalized && normalizer)
      pattern = normalizer->normalize(pattern);
    if (!pattern.empty())
      first_bytes_.set(static_cast<unsigned char>(pattern[0]));
    by_id_[t.id] = tokens_.size();
    by_content_[t.content] = t.id;
    end_id_ = std::max(end_id_, t.id + 1);
    tokens_.push_back(std::move(t));
    patterns_.push_back(std::move(pattern));
  }
}

void AddedVocabulary::split(std::vector<Piece>& pieces, bool normalized) const {
  bool any = false;
  for (const AddedToken& t : tokens_)
    any = any || t.normalized == normalized;
  if (!any)
    return;
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    if (piece.token) {
      out.push_back(std::move(piece));
      continue;
    }
    const std::string& s = piece.text;
    std::size_t done = 0;  // the text before `done` is emitted
    std::size_t pos = 0;
    while (pos < s.size()) {
      // The longest token that matches at `pos`.
      std::size_t best = tokens_.size();
      if (!first_bytes_.test(static_cast<unsigned char>(s[pos]))) {
        ++pos;
        continue;
      }
      for (std::size_t i = 0; i < tokens_.size(); ++i) {
        const std::string& p = patterns_[i];
        if (tokens_[i].normalized != normalized || p.empty() || s.compare(pos, p.size(), p) != 0)
          continue;
        if (best == tokens_.size() || p.size() > patterns_[best].size())
          best = i;
      }
      if (best == tokens_.size()) {
        ++pos;
        continue;
      }
      const AddedToken& t = tokens_[best];
      std::size_t start = pos, stop = pos + patterns_[best].size();
      if (t.single_word) {
        const bool space_before = start == 0 || !is_word_char(last_char(s, start));
        char32_t next = 0;
        if (stop < s.size())
          next_code_point(s, stop, next);
        const bool space_after = stop == s.size() || !is_word_char(next);
        if (!space_before || !space_after) {
          ++pos;
          continue;
        }
      }
      if (t.lstrip) {
        while (start > done && is_whitespace(last_char(s, start))) {
          std::size_t back = start - 1;
          while (back > done && (static_cast<unsigned char>(s[back]) & 0xC0) == 0x80)
            --back;
          start = back;
        }
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          char32_t cp;
          const std::size_t n = next_code_point(s, stop, cp);
          if (!is_whitespace(cp))
            break;
          stop += n;
        }
      }
      if (start > done)
        out.push_back({s.substr(done, start - done), piece.at_origin && done == 0, std::nullopt});
      out.push_back({s.substr(start, stop - start), piece.at_origin && start == 0, t.id});
      done = pos = stop;
    }
    if (done < s.size())
      out.push_back({s.substr(done), piece.at_origin && done == 0, std::nullopt});
  }
  pieces = std::move(out);
}

std::optional<int64_t> AddedVocabulary::token_to_id(const std::string& content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end())
    return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::find(int64_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace bigbatch::text
