#include "bigbatch/text/bpe.h"

#include <queue>

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {

Bpe::Bpe(const nlohmann::json& j, const JsonPlace& place)
    : vocab_(Vocab::from_json(member(j, "vocab", place), place.at("vocab"))) {
  const auto dropout = j.find("dropout");
  BB_CHECK_INPUT(dropout == j.end() || dropout->is_null(), place.at("dropout").str(),
                 ": BPE dropout ", dropout->dump(),
                 " is not supported (only null: encoding must be deterministic)");
  if (const auto unk = optional_string(j, "unk_token", place)) {
    unk_id_ = vocab_.find(*unk);
    BB_CHECK_INPUT(unk_id_, place.at("unk_token").str(), ": the unknown token \"", *unk,
                   "\" is not in the vocabulary");
  }
  prefix_ = optional_string(j, "continuing_subword_prefix", place).value_or("");
  suffix_ = optional_string(j, "end_of_word_suffix", place).value_or("");
  fuse_unk_ = bool_member(j, "fuse_unk", place, false);
  byte_fallback_ = bool_member(j, "byte_fallback", place, false);
  ignore_merges_ = bool_member(j, "ignore_merges", place, false);
  byte_ids_ = byte_piece_ids(vocab_);

  const nlohmann::json& merges = member(j, "merges", place);
  BB_CHECK_INPUT(merges.is_array(), place.at("merges").str(), ": expected a list");
  merges_.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = merges[i];
    const JsonPlace at = place.at("merges").at(i);
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      BB_CHECK_INPUT(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                     at.str(), ": a merge must be two tokens separated by one space, got \"", s,
                     "\"");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      BB_CHECK_INPUT(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                     at.str(), ": a merge must be \"a b\" or [\"a\", \"b\"], got ", m.dump());
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    const auto a_id = vocab_.find(a), b_id = vocab_.find(b);
    BB_CHECK_INPUT(a_id, at.str(), ": merge token \"", a, "\" is not in the vocabulary");
    BB_CHECK_INPUT(b_id, at.str(), ": merge token \"", b, "\" is not in the vocabulary");
    BB_CHECK_INPUT(b.size() >= prefix_.size(), at.str(), ": merge token \"", b,
                   "\" is shorter than the continuing_subword_prefix");
    const std::string merged = a + b.substr(prefix_.size());
    const auto new_id = vocab_.find(merged);
    BB_CHECK_INPUT(new_id, at.str(), ": the merged token \"", merged,
                   "\" is not in the vocabulary");
    merges_.emplace(key(*a_id, *b_id), Merge{static_cast<int64_t>(i), *new_id});
  }
}

void Bpe::tokenize(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty())
    return;
  if (ignore_merges_) {
    if (const auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  // The symbols: one per character (or per byte with byte fallback), linked both ways.
  std::vector<int64_t> ids;
  std::optional<int64_t> pending_unk;
  std::string s;
  for (std::size_t pos = 0; pos < word.size();) {
    char32_t cp;
    const std::size_t n = next_code_point(word, pos, cp);
    s.clear();
    if (pos > 0)
      s = prefix_;
    s.append(word, pos, n);
    if (pos + n == word.size())
      s += suffix_;
    pos += n;
    if (const auto id = vocab_.find(s)) {
      if (pending_unk) {
        ids.push_back(*pending_unk);
        pending_unk.reset();
      }
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char byte : s)
        all = all && byte_ids_[byte] >= 0;
      if (all) {
        // (tokenizers adds the byte tokens without flushing a pending unknown token first)
        for (unsigned char byte : s)
          ids.push_back(byte_ids_[byte]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_)
        ids.push_back(*pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk)
    ids.push_back(*pending_unk);

  const int count = static_cast<int>(ids.size());
  std::vector<int> prev(count), next(count);
  std::vector<bool> removed(count, false);
  for (int i = 0; i < count; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < count ? i + 1 : -1;
  }
  struct Candidate {
    int64_t rank;
    int pos;
    int64_t new_id;
    bool operator<(const Candidate& o) const {  // a min-heap on (rank, pos)
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  const auto push = [&](int left) {
    const int right = next[left];
    if (right < 0)
      return;
    const auto it = merges_.find(key(ids[left], ids[right]));
    if (it != merges_.end())
      queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < count; ++i)
    push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (removed[top.pos] || next[top.pos] < 0)
      continue;
    const int right = next[top.pos];
    const auto it = merges_.find(key(ids[top.pos], ids[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id)
      continue;  // an expired entry
    ids[top.pos] = top.new_id;
    removed[right] = true;
    next[top.pos] = next[right];
    if (next[right] >= 0)
      prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0)
      push(prev[top.pos]);
    push(top.pos);
  }
  for (int i = 0; i < count; ++i)
    if (!removed[i])
      out.push_back(ids[i]);
}

}  // namespace bigbatch::text
