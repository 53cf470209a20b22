// Helpers shared by the test executables.
#pragma once

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"

namespace bigbatch::testing {

/// A fresh, empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory's path.
  const std::filesystem::path& path() const { return path_; }
  /// Writes `content` to `name` inside the directory and returns its path.
  std::filesystem::path write(const std::string& name, const std::string& content) const;

 private:
  std::filesystem::path path_;
};

/// max |a - b| / max(|b|, tiny) taken norm-wise: ||a - b|| / ||b||.
double relative_difference(const torch::Tensor& a, const torch::Tensor& b);

/// Runs `action` and returns the message of the bigbatch::InputError it must throw (a test
/// failure, and "", when it throws none).
template <typename Action>
std::string input_error_of(Action action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected bigbatch::InputError";
  return "";
}

/// Runs `action` and returns the message of the std::logic_error (a failed BB_CHECK) it must
/// throw (a test failure, and "", when it throws none).
template <typename Action>
std::string logic_error_of(Action action) {
  try {
    action();
  } catch (const std::logic_error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected std::logic_error";
  return "";
}

/// Expects `message` to contain every one of `parts` (one failure naming each missing part).
inline void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

/// Reads a whole file into a string (throws if it cannot be opened).
std::string read_file(const std::filesystem::path& path);

/// How often `what` occurs in `text` (overlapping occurrences counted).
size_t count_occurrences(const std::string& text, const std::string& what);

}  // namespace bigbatch::testing
