// The checkpoint container: a versioned, checksummed file written atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace bigbatch::io {

/// The layout of a checkpoint file, all integers little-endian:
///   bytes  0-7   magic "BBCKPT\r\n" (the CR LF pair shows text-mode mangling, as in PNG)
///   bytes  8-11  format version (kCheckpointFormatVersion)
///   bytes 12-15  CRC-32 (zlib's) of the header and payload bytes that follow
///   bytes 16-23  header length H
///   bytes 24-31  payload length P
///   then H header bytes (JSON text: what the file holds, readable without the payload), then P
///   payload bytes (tensors). The file is exactly 32 + H + P bytes long.
constexpr uint32_t kCheckpointFormatVersion = 1;
/// Bytes before the header.
constexpr size_t kCheckpointPreambleBytes = 32;

/// A checkpoint file's two parts.
struct CheckpointFile {
  std::string header;   ///< JSON text
  std::string payload;  ///< opaque bytes (a LibTorch archive)
};

/// A checkpoint file that cannot be used: missing, unreadable, truncated, corrupt, of another
/// format version. what() names the file and the cause.
class CheckpointFileError : public std::runtime_error {
 public:
  CheckpointFileError(const std::string& path, const std::string& cause)
      : std::runtime_error(path + ": " + cause), path_(path), cause_(cause) {}
  /// The file.
  const std::string& path() const { return path_; }
  /// What is wrong with it, without the path.
  const std::string& cause() const { return cause_; }

 private:
  std::string path_;
  std::string cause_;
};

/// Writes `file` to `path` atomically (see write_file_atomically): a reader, or a process that
/// dies during the write, sees the previous file or the new one, never a torn one. Throws
/// std::runtime_error naming the path and the system error (a full disk: "No space left on
/// device"); the previous file at `path` is then untouched.
void write_checkpoint_file(const std::string& path, const CheckpointFile& file);

/// Takes a piece of a payload: `size` bytes at `data`. Throws std::runtime_error when the write
/// fails (a full disk); a producer that cannot pass exceptions through must keep and rethrow it.
using PayloadSink = std::function<void(const void* data, size_t size)>;

/// write_checkpoint_file with the payload produced by `write_payload`, which hands it to the sink
/// it is given in pieces: they go straight into the file (the checksum and length are filled in
/// after them), so the payload is never held in memory whole. Atomic as write_checkpoint_file;
/// an exception from `write_payload` leaves the previous file too.
void write_checkpoint_file(const std::string& path, const std::string& header,
                           const std::function<void(const PayloadSink&)>& write_payload);

/// Reads and verifies the file at `path`: magic, version, lengths and checksum. Throws
/// CheckpointFileError naming the file and what is wrong.
CheckpointFile read_checkpoint_file(const std::string& path);

}  // namespace bigbatch::io
