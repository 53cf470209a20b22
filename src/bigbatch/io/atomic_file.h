// Writing files so that a reader sees the old content or the new, never a torn file.
#pragma once

#include <string>

namespace bigbatch::io {

/// Writes `content` to a temporary file beside `path`, flushes it to disk (fsync), renames it over
/// `path` and syncs the directory. Throws std::runtime_error naming the path and the system error;
/// on failure the temporary file is removed and any previous `path` is left untouched.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace bigbatch::io
