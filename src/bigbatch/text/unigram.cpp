#include "bigbatch/text/unigram.h"

#include <algorithm>
#include <limits>

#include "bigbatch/core/check.h"
#include "bigbatch/text/unicode.h"

namespace bigbatch::text {
namespace {

/// SentencePiece's penalty of an unknown piece below the lowest score.
constexpr double kUnknownPenalty = 10.0;

}  // namespace

Unigram::Unigram(const nlohmann::json& j, const JsonPlace& place) {
  const nlohmann::json& pieces = member(j, "vocab", place);
  const JsonPlace at = place.at("vocab");
  check_list(pieces, at);
  double lowest = std::numeric_limits<double>::infinity();
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    const nlohmann::json& p = pieces[id];
    BB_CHECK_INPUT(p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_number(),
                   at.at(id).str(), ": expected [piece, score], got ", p.dump());
    const std::string piece = p[0].get<std::string>();
    BB_CHECK_INPUT(vocab_.ids.emplace(piece, int64_t(id)).second, at.at(id).str(), ": piece \"",
                   piece, "\" is listed twice");
    vocab_.tokens.push_back(piece);
    scores_.push_back(p[1].get<double>());
    lowest = std::min(lowest, scores_.back());
    longest_piece_ = std::max(longest_piece_, piece.size());
  }
  BB_CHECK_INPUT(!pieces.empty(), at.str(), ": the vocabulary is empty");
  unk_score_ = lowest - kUnknownPenalty;
  const auto unk = j.find("unk_id");
  if (unk != j.end() && !unk->is_null()) {
    BB_CHECK_INPUT(unk->is_number_integer() && unk->get<int64_t>() >= 0 &&
                       unk->get<int64_t>() < int64_t(pieces.size()),
                   place.at("unk_id").str(), ": ", unk->dump(), " is not an id of the ",
                   pieces.size(), " pieces");
    unk_id_ = unk->get<int64_t>();
  }
  byte_fallback_ = bool_member(j, "byte_fallback", place, false);
  byte_ids_ = byte_piece_ids(vocab_);
}

std::vector<std::string> Unigram::segment(const std::string& word) const {
  struct Node {
    int64_t id = -1;        ///< the piece that ends here on the best path
    double score = 0.0;     ///< the best path's score up to here
    std::size_t start = 0;  ///< where that piece starts
    bool reached = false;
  };
  const std::size_t size = word.size();
  std::vector<Node> best(size + 1);
  best[0].reached = true;
  std::string piece;
  for (std::size_t start = 0; start < size;) {
    char32_t cp;
    const std::size_t first_char = next_code_point(word, start, cp);
    const double before = best[start].score;
    bool single_char_piece = false;
    // Every piece that starts here, shortest first (tokenizers walks its trie so): a later one
    // replaces an earlier only with a strictly higher score.
    for (std::size_t end = start + first_char; end <= size && end - start <= longest_piece_;) {
      piece.assign(word, start, end - start);
      if (const auto id = vocab_.find(piece)) {
        Node& node = best[end];
        const double score = before + scores_[*id];
        if (!node.reached || score > node.score)
          node = {*id, score, start, true};
        single_char_piece = single_char_piece || end - start == first_char;
      }
      if (end == size)
        break;
      end += next_code_point(word, end, cp);
    }
    if (!single_char_piece) {
      Node& node = best[start + first_char];
      const double score = before + unk_score_;
      if (!node.reached || score > node.score)
        node = {unk_id_.value_or(-1), score, start, true};
    }
    start += first_char;
  }
  // Back from the end; consecutive unknown characters become one piece.
  std::vector<std::string> pieces;
  std::string unknown;
  for (std::size_t end = size; end > 0;) {
    const Node& node = best[end];
    if (node.id < 0 || (unk_id_ && node.id == *unk_id_)) {
      unknown.insert(0, word, node.start, end - node.start);
    } else {
      if (!unknown.empty()) {
        pieces.push_back(std::move(unknown));
        unknown.clear();
      }
      pieces.push_back(vocab_.tokens[node.id]);
    }
    end = node.start;
  }
  if (!unknown.empty())
    pieces.push_back(std::move(unknown));
  std::reverse(pieces.begin(), pieces.end());
  return pieces;
}

void Unigram::tokenize(const std::string& word, std::vector<int64_t>& out) const {
  for (const std::string& piece : segment(word)) {
    if (const auto id = vocab_.find(piece)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_ && std::all_of(piece.begin(), piece.end(), [this](char byte) {
          return byte_ids_[static_cast<unsigned char>(byte)] >= 0;
        })) {
      for (const char byte : piece)
        out.push_back(byte_ids_[static_cast<unsigned char>(byte)]);
      continue;
    }
    BB_CHECK_INPUT(unk_id_, "Unigram: \"", piece,
                   "\" has no piece and the model has no unk_id to stand for it");
    out.push_back(*unk_id_);
  }
}

}  // namespace bigbatch::text
