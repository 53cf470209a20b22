#include "bigbatch/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace bigbatch::io {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temporary_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot create " + temporary_ + ": " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (committed_)
    return;
  if (fd_ >= 0)
    ::close(fd_);
  ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& what, int error) {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  ::unlink(temporary_.c_str());
  throw std::runtime_error(what + " " + path_ + ": " + std::strerror(error));
}

void AtomicFile::append(const void* data, size_t size) {
  if (fd_ < 0)
    throw std::logic_error("AtomicFile::append after a failure or commit of " + path_);
  const char* bytes = static_cast<const char*>(data);
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd_, bytes + written, size - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail("cannot write", n < 0 ? errno : EIO);
    written += static_cast<size_t>(n);
  }
  size_ += size;
}

void AtomicFile::overwrite(uint64_t offset, const void* data, size_t size) {
  if (fd_ < 0 || offset + size > size_) {
    throw std::logic_error("AtomicFile::overwrite of bytes " + std::to_string(offset) + "-" +
                           std::to_string(offset + size) + " of " + path_ + ", which holds " +
                           std::to_string(size_));
  }
  const char* bytes = static_cast<const char*>(data);
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::pwrite(fd_, bytes + written, size - written, off_t(offset + written));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail("cannot write", n < 0 ? errno : EIO);
    written += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0)
    throw std::logic_error("AtomicFile::commit after a failure or commit of " + path_);
  const int fd = std::exchange(fd_, -1);
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail("cannot flush", error);
  }
  if (::close(fd) != 0)
    fail("cannot flush", errno);
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
    fail("cannot rename into", errno);
  committed_ = true;
  std::string directory = std::filesystem::path(path_).parent_path().string();
  if (directory.empty())
    directory = ".";
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.append(content.data(), content.size());
  file.commit();
}

}  // namespace bigbatch::io
