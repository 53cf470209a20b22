// Writing files so that a reader sees the old content or the new, never a torn file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace bigbatch::io {

/// A file written under a temporary name beside `path` and renamed over `path` by commit(), so
/// that a reader, or a process that dies before commit(), sees the previous file or the new one,
/// never a torn one. Content is appended in pieces as it is produced (a large file need not be
/// held in memory whole); destroyed without commit(), it removes the temporary file and leaves
/// `path` untouched. Every failure throws std::runtime_error naming the path and the system error.
class AtomicFile {
 public:
  /// Creates the temporary file `path`.tmp.<pid>.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `size` bytes.
  void append(const void* data, size_t size);
  /// Overwrites `size` bytes at `offset`, which must lie within what was appended.
  void overwrite(uint64_t offset, const void* data, size_t size);
  /// Flushes the file to disk (fsync), renames it over `path` and syncs the directory.
  void commit();

 private:
  void fail(const std::string& what, int error);

  std::string path_;
  std::string temporary_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
};

/// Writes `content` to `path` through an AtomicFile. Throws std::runtime_error naming the path and
/// the system error; on failure the temporary file is removed and any previous `path` is left
/// untouched.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace bigbatch::io
