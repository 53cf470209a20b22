#include "support/test_support.h"

#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace bigbatch::testing {

TempDir::TempDir() {
  std::random_device device;
  std::mt19937_64 rng(device());
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate =
        std::filesystem::temp_directory_path() / ("bigbatch-test-" + std::to_string(rng()));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("could not create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::filesystem::path TempDir::write(const std::string& name, const std::string& content) const {
  const auto file = path_ / name;
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  out << content;
  if (!out)
    throw std::runtime_error("could not write " + file.string());
  return file;
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const double denominator = std::max(b.norm().item<double>(), 1e-300);
  return (a - b).norm().item<double>() / denominator;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("could not open " + path.string());
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

size_t count_occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

}  // namespace bigbatch::testing
