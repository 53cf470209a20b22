// Writing gzip streams in tests (zlib), for the readers of compressed data files.
#pragma once

#include <zlib.h>

#include <stdexcept>
#include <string>

namespace bigbatch::testing {

/// `raw` compressed as one gzip member (header, deflate data, CRC-32 and size trailer).
inline std::string gzip(const std::string& raw) {
  z_stream stream{};
  // windowBits 15 + 16 asks deflate for a gzip wrapper instead of a zlib one.
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out(deflateBound(&stream, static_cast<uLong>(raw.size())) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  stream.avail_in = static_cast<uInt>(raw.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&stream, Z_FINISH);
  deflateEnd(&stream);
  if (result != Z_STREAM_END)
    throw std::runtime_error("deflate did not finish");
  out.resize(stream.total_out);
  return out;
}

}  // namespace bigbatch::testing
