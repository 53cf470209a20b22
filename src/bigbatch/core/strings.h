// Small string tests the code base needs in several places (std::string has them only from C++20).
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

/// Whether `text` begins with `prefix`.
inline bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

/// Whether `text` ends with `suffix`.
inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The parts joined by `separator`: join({"a", "b"}) == "a, b".
inline std::string join(const std::vector<std::string>& parts,
                        const std::string& separator = ", ") {
  std::string out;
  for (const std::string& part : parts)
    out += (out.empty() ? "" : separator) + part;
  return out;
}

}  // namespace bigbatch
