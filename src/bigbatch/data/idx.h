// Reading IDX files (the MNIST / Fashion-MNIST array format), gzip-compressed or raw.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch::data {

/// The IDX element type code for unsigned bytes, the only one read_idx supports.
inline constexpr int kIdxUnsignedByte = 0x08;

/// Most data bytes read_idx accepts by default: 4 GiB, far above any IDX data set in use
/// (Fashion-MNIST's training images are 47,040,000 bytes).
inline constexpr int64_t kIdxDefaultMaxBytes = int64_t{1} << 32;

/// An array read from an IDX file.
struct IdxArray {
  /// The dimensions from the header, outermost first, for example {60000, 28, 28}.
  std::vector<int64_t> dims;
  /// The elements: uint8, shaped `dims`, contiguous, for example (N, H, W) uint8.
  torch::Tensor data;
};

/// Reads the IDX file at `path` (http://yann.lecun.com/exdb/mnist/): two zero bytes, the type
/// code, the rank r, r big-endian uint32 dimensions, then the elements in row-major order. A file
/// that starts with the gzip magic bytes 1f 8b is decompressed with zlib while it is read; any
/// other file is read as raw IDX. The file must hold exactly the data its header promises.
/// Throws InputError naming `path` and the cause when the file cannot be opened (with the
/// system's reason), the gzip stream is corrupt or ends early, the magic bytes are wrong (the
/// bytes found and expected), the type is not 0x08 (unsigned byte; the code found), the rank is
/// 0, the dimensions multiply to more than `max_bytes`, the data is shorter than the dimensions
/// promise (bytes expected and found) or bytes follow the data (how many). The size check runs
/// before anything is allocated. Usage:
///   IdxArray images = read_idx("train-images-idx3-ubyte.gz");  // dims {60000, 28, 28}
IdxArray read_idx(const std::string& path, int64_t max_bytes = kIdxDefaultMaxBytes);

/// The bytes of an IDX file holding `data` (uint8, any rank from 1 to 255, made contiguous):
/// the header followed by the elements, uncompressed. For writing test and example files.
std::string idx_bytes(const torch::Tensor& data);

}  // namespace bigbatch::data
