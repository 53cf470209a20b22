#include "bigbatch/io/read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace bigbatch::io {

std::string read_file(const std::string& path) {
  // A directory opens as a stream that reads nothing and reports no error.
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored))
    throw std::runtime_error("cannot read " + path + ": it is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad())
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  return content.str();
}

std::string read_file_or_empty(const std::string& path) {
  try {
    return read_file(path);
  } catch (const std::runtime_error&) {
    return "";
  }
}

}  // namespace bigbatch::io
