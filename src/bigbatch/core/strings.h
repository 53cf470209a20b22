// Small string tests the code base needs in several places (std::string has them only from C++20).
#pragma once

#include <string>

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

}  // namespace bigbatch
