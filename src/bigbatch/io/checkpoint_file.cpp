#include "bigbatch/io/checkpoint_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "bigbatch/io/atomic_file.h"

namespace bigbatch::io {

namespace {

constexpr char kMagic[8] = {'B', 'B', 'C', 'K', 'P', 'T', '\r', '\n'};

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(const std::string& in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  return value;
}

/// zlib's CRC-32 `crc` continued over `size` bytes at `data`, fed in chunks that fit zlib's 32-bit
/// length.
uLong crc32_continued(uLong crc, const void* data, size_t size) {
  const auto* bytes = static_cast<const Bytef*>(data);
  while (size > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = ::crc32(crc, bytes, chunk);
    bytes += chunk;
    size -= chunk;
  }
  return crc;
}

/// zlib's CRC-32 of `a` then `b`.
uint32_t crc32_of(const std::string& a, const std::string& b) {
  const uLong crc = crc32_continued(::crc32(0L, Z_NULL, 0), a.data(), a.size());
  return static_cast<uint32_t>(crc32_continued(crc, b.data(), b.size()));
}

/// The preamble: magic, version, checksum, header and payload lengths.
std::string preamble(uint32_t crc, uint64_t header_bytes, uint64_t payload_bytes) {
  std::string bytes(kMagic, sizeof(kMagic));
  put_le(bytes, kCheckpointFormatVersion, 4);
  put_le(bytes, crc, 4);
  put_le(bytes, header_bytes, 8);
  put_le(bytes, payload_bytes, 8);
  return bytes;
}

std::string hex(uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << value;
  return out.str();
}

std::string printable(const std::string& bytes) {
  std::string text;
  for (const char c : bytes)
    if (c >= 32 && c < 127) {
      text += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned char>(c));
      text += escaped;
    }
  return text;
}

}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointFile& file) {
  write_checkpoint_file(path, file.header, [&file](const PayloadSink& sink) {
    sink(file.payload.data(), file.payload.size());
  });
}

void write_checkpoint_file(const std::string& path, const std::string& header,
                           const std::function<void(const PayloadSink&)>& write_payload) {
  AtomicFile out(path);
  const std::string placeholder(kCheckpointPreambleBytes, '\0');  // filled in at the end
  out.append(placeholder.data(), placeholder.size());
  out.append(header.data(), header.size());
  uLong crc = crc32_continued(::crc32(0L, Z_NULL, 0), header.data(), header.size());
  uint64_t payload_bytes = 0;
  write_payload([&](const void* data, size_t size) {
    out.append(data, size);
    crc = crc32_continued(crc, data, size);
    payload_bytes += size;
  });
  const std::string filled = preamble(static_cast<uint32_t>(crc), header.size(), payload_bytes);
  out.overwrite(0, filled.data(), filled.size());
  out.commit();
}

CheckpointFile read_checkpoint_file(const std::string& path) {
  // Read part by part into the strings returned: the file is held in memory once, not copied.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    throw CheckpointFileError(path, std::string("cannot open: ") + std::strerror(errno));
  const std::streamoff end = in.tellg();
  in.seekg(0);
  if (end < 0 || !in)
    throw CheckpointFileError(path, std::string("cannot read: ") + std::strerror(errno));
  const uint64_t file_bytes = static_cast<uint64_t>(end);
  const auto read_into = [&](std::string& part, uint64_t size) {
    part.resize(size);
    if (size > 0 && !in.read(part.data(), static_cast<std::streamsize>(size)))
      throw CheckpointFileError(path, std::string("cannot read: ") + std::strerror(errno));
  };
  if (file_bytes < kCheckpointPreambleBytes) {
    throw CheckpointFileError(path, "truncated: " + std::to_string(file_bytes) +
                                        " bytes, shorter than the " +
                                        std::to_string(kCheckpointPreambleBytes) +
                                        "-byte preamble of a bigbatch checkpoint");
  }
  std::string bytes;  // the preamble
  read_into(bytes, kCheckpointPreambleBytes);
  if (bytes.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointFileError(path, "not a bigbatch checkpoint: it starts with \"" +
                                        printable(bytes.substr(0, sizeof(kMagic))) +
                                        "\", not \"BBCKPT\\r\\n\"");
  }
  const uint64_t version = get_le(bytes, 8, 4);
  if (version != kCheckpointFormatVersion) {
    throw CheckpointFileError(path, "checkpoint format version " + std::to_string(version) +
                                        "; this bigbatch reads version " +
                                        std::to_string(kCheckpointFormatVersion));
  }
  const uint32_t stored_crc = static_cast<uint32_t>(get_le(bytes, 12, 4));
  const uint64_t header_bytes = get_le(bytes, 16, 8);
  const uint64_t payload_bytes = get_le(bytes, 24, 8);
  const uint64_t body = file_bytes - kCheckpointPreambleBytes;
  const bool short_file = header_bytes > body || payload_bytes > body - header_bytes;
  if (short_file || payload_bytes < body - header_bytes) {
    throw CheckpointFileError(
        path, std::string(short_file ? "truncated: " : "trailing bytes: ") +
                  std::to_string(file_bytes) + " bytes, but its preamble announces " +
                  std::to_string(header_bytes) + " bytes of header and " +
                  std::to_string(payload_bytes) + " of payload after the " +
                  std::to_string(kCheckpointPreambleBytes) + "-byte preamble");
  }
  CheckpointFile file;
  read_into(file.header, header_bytes);
  read_into(file.payload, payload_bytes);
  const uint32_t computed_crc = crc32_of(file.header, file.payload);
  if (computed_crc != stored_crc) {
    throw CheckpointFileError(path, "corrupt: the CRC-32 of its contents is " + hex(computed_crc) +
                                        ", the file says " + hex(stored_crc) +
                                        " (the file changed after it was written)");
  }
  return file;
}

}  // namespace bigbatch::io
