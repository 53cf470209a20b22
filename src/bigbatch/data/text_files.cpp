#include "bigbatch/data/text_files.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/data/fortune_collections.h"

namespace bigbatch::data {

namespace fs = std::filesystem;

bool is_ignored_name(const std::string& name) {
  return name.empty() || name[0] == '.' || ends_with(name, ".dat") || ends_with(name, ".u8");
}

bool read_text(const std::string& file, std::string& text, std::string& cause) {
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    cause = errno != 0 ? std::error_code(errno, std::generic_category()).message() : "open failed";
    return false;
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) {
    cause = "read failed";
    return false;
  }
  text = content.str();
  return true;
}

std::vector<NamedText> read_text_files(const std::string& directory, const std::string& prefix,
                                       std::vector<std::string>& skipped) {
  std::vector<NamedText> files;
  try {
    for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
      const std::string name = entry.path().filename().string();
      if (is_ignored_name(name) || entry.is_symlink() || !entry.is_regular_file())
        continue;
      std::string text;
      std::string cause;
      if (!read_text(entry.path().string(), text, cause)) {
        skipped.push_back(cat(prefix, name, ": cannot read (", cause, ")"));
      } else if (text.find('\0') != std::string::npos) {
        skipped.push_back(cat(prefix, name, ": not text (holds a NUL byte)"));
      } else {
        files.emplace_back(name, std::move(text));
      }
    }
  } catch (const fs::filesystem_error& e) {
    throw InputError(cat("cannot list directory '", directory, "': ", e.code().message()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> read_documents(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  BB_CHECK_INPUT(status.type() != fs::file_type::not_found, "text data '", path,
                 "' does not exist");
  std::vector<NamedText> files;
  std::vector<std::string> skipped;
  if (fs::is_directory(status)) {
    files = read_text_files(path, "", skipped);
  } else {
    std::string text, cause;
    BB_CHECK_INPUT(read_text(path, text, cause), "cannot read text data '", path, "': ", cause);
    BB_CHECK_INPUT(text.find('\0') == std::string::npos, "text data '", path,
                   "' is not text (holds a NUL byte)");
    files.emplace_back(path, std::move(text));
  }
  std::vector<std::string> documents;
  for (const auto& file : files) {
    for (std::string& document : split_fortunes(file.second))
      documents.push_back(std::move(document));
  }
  BB_CHECK_INPUT(!documents.empty(), "text data '", path, "' holds no document (no text file",
                 fs::is_directory(status) ? " directly in it" : "", " with text)");
  return documents;
}

}  // namespace bigbatch::data
