#include "bigbatch/text/pattern.h"

#include "bigbatch/core/check.h"

namespace bigbatch::text {

Pattern::Pattern(const nlohmann::json& j, const JsonPlace& place) {
  BB_CHECK_INPUT(j.is_object() && j.size() == 1 && (j.contains("String") || j.contains("Regex")),
                 place.str(), ": expected {\"String\": ...} or {\"Regex\": ...}, got ", j.dump());
  if (j.contains("String")) {
    literal_ = string_member(j, "String", place);
  } else {
    regex_ = std::make_shared<Regex>(string_member(j, "Regex", place), place.str());
  }
}

std::vector<std::pair<std::size_t, std::size_t>> Pattern::find_all(const std::string& text) const {
  if (regex_)
    return regex_->find_all(text);
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  if (literal_.empty())
    return matches;
  for (std::size_t at = text.find(literal_); at != std::string::npos;
       at = text.find(literal_, at + literal_.size()))
    matches.emplace_back(at, at + literal_.size());
  return matches;
}

std::string Pattern::replace_all(const std::string& text, const std::string& content) const {
  std::string out;
  std::size_t done = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text, done, begin - done);
    out += content;
    done = end;
  }
  out.append(text, done, std::string::npos);
  return out;
}

}  // namespace bigbatch::text
