// Reading a whole file, with an error that names it.
#pragma once

#include <string>

namespace bigbatch::io {

/// The bytes of the file at `path`. Throws std::runtime_error naming the path and the system
/// error when it cannot be opened or read.
std::string read_file(const std::string& path);

/// The bytes of the file at `path`, or "" when it cannot be read (a /proc or /sys file that this
/// system does not have).
std::string read_file_or_empty(const std::string& path);

}  // namespace bigbatch::io
