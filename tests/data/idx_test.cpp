#include "bigbatch/data/idx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "support/gzip.h"
#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using bigbatch::testing::gzip;
using bigbatch::testing::input_error_of;
using bigbatch::testing::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

/// A (2, 3, 4) uint8 array with distinct values.
torch::Tensor small_array() {
  return torch::arange(24, torch::kByte).mul_(7).reshape({2, 3, 4});
}

/// An IDX header for unsigned bytes with the given dimensions.
std::string header(const std::vector<uint32_t>& dims) {
  std::string out = {'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (const uint32_t dim : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out += static_cast<char>((dim >> shift) & 0xff);
  }
  return out;
}

TEST(Idx, BytesAreHeaderThenDataInRowMajorOrder) {
  const torch::Tensor data = torch::tensor({1, 2, 3, 4, 5, 6}, torch::kByte).reshape({2, 3});
  const std::string bytes = idx_bytes(data.t().contiguous().t());  // non-contiguous input
  EXPECT_EQ(bytes, header({2, 3}) + std::string("\x01\x02\x03\x04\x05\x06"));
}

TEST(Idx, RawAndGzipFilesReadTheSameArray) {
  TempDir dir;
  const torch::Tensor data = small_array();
  const std::string bytes = idx_bytes(data);
  const fs::path raw = dir.write("array-idx3-ubyte", bytes);
  const fs::path compressed = dir.write("array-idx3-ubyte.gz", gzip(bytes));
  ASSERT_EQ(bigbatch::testing::read_file(compressed).substr(0, 2), std::string("\x1f\x8b"));
  for (const fs::path& path : {raw, compressed}) {
    const IdxArray array = read_idx(path.string());
    EXPECT_EQ(array.dims, (std::vector<int64_t>{2, 3, 4})) << path;
    EXPECT_EQ(array.data.scalar_type(), torch::kByte);
    EXPECT_TRUE(array.data.is_contiguous());
    EXPECT_TRUE(torch::equal(array.data, data)) << path;
  }
}

TEST(Idx, RankOneAndEmptyArrays) {
  TempDir dir;
  const torch::Tensor labels = torch::tensor({9, 0, 0, 3}, torch::kByte);
  const IdxArray read = read_idx(dir.write("labels.gz", gzip(idx_bytes(labels))).string());
  EXPECT_EQ(read.dims, std::vector<int64_t>{4});
  EXPECT_TRUE(torch::equal(read.data, labels));
  const IdxArray empty = read_idx(dir.write("empty", header({0, 28, 28})).string());
  EXPECT_EQ(empty.dims, (std::vector<int64_t>{0, 28, 28}));
  EXPECT_EQ(empty.data.numel(), 0);
}

TEST(Idx, MissingFileNamesThePathAndTheSystemReason) {
  TempDir dir;
  const std::string missing = (dir.path() / "no-such-images.gz").string();
  const std::string message = input_error_of([&] { read_idx(missing); });
  EXPECT_THAT(message, HasSubstr(missing));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

TEST(Idx, UnreadablePathNamesThePathAndTheReason) {
  // A directory opens but cannot be read (file permissions do not stop root, who runs CI).
  TempDir dir;
  const std::string message = input_error_of([&] { read_idx(dir.path().string()); });
  EXPECT_THAT(message, HasSubstr(dir.path().string()));
  EXPECT_THAT(message, HasSubstr("Is a directory"));
}

TEST(Idx, TruncatedGzipStreamIsAnInputError) {
  TempDir dir;
  const std::string compressed = gzip(idx_bytes(small_array()));
  // Cut in the middle of the deflate data, and cut only the 8-byte trailer (CRC-32 and size):
  // in the second case every data byte decompresses, yet the stream is incomplete.
  for (const size_t keep : {compressed.size() / 2, compressed.size() - 8, size_t{5}}) {
    const fs::path path = dir.write("cut.gz", compressed.substr(0, keep));
    const std::string message = input_error_of([&] { read_idx(path.string()); });
    EXPECT_THAT(message, HasSubstr(path.string())) << keep;
    EXPECT_THAT(message, HasSubstr("gzip stream")) << keep;
    EXPECT_THAT(message, HasSubstr("truncated or corrupt")) << keep;
    EXPECT_THAT(message, HasSubstr("unexpected end of file")) << keep;
  }
}

TEST(Idx, GzipChecksumMismatchIsAnInputError) {
  TempDir dir;
  std::string compressed = gzip(idx_bytes(small_array()));
  compressed[compressed.size() - 8] ^= 0x01;  // first byte of the CRC-32
  const fs::path path = dir.write("bad-crc.gz", compressed);
  const std::string message = input_error_of([&] { read_idx(path.string()); });
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("incorrect data check"));
}

TEST(Idx, WrongMagicNamesTheBytesFoundAndExpected) {
  TempDir dir;
  const fs::path zip = dir.write("images.zip", std::string("PK\x03\x04 not idx at all", 20));
  const std::string raw = input_error_of([&] { read_idx(zip.string()); });
  EXPECT_THAT(raw, HasSubstr(zip.string()));
  EXPECT_THAT(raw, HasSubstr("wrong magic"));
  EXPECT_THAT(raw, HasSubstr("found bytes 50 4b 03 04"));
  EXPECT_THAT(raw, HasSubstr("expected 00 00"));
  // A gzip file whose content is not IDX: the magic is checked after decompression.
  const fs::path text = dir.write("text.gz", gzip("hello, world\n"));
  const std::string compressed = input_error_of([&] { read_idx(text.string()); });
  EXPECT_THAT(compressed, HasSubstr("wrong magic in gzip-compressed IDX file '" + text.string()));
  EXPECT_THAT(compressed, HasSubstr("found bytes 68 65 6c 6c"));
}

TEST(Idx, TooShortForAHeader) {
  TempDir dir;
  const fs::path empty = dir.write("empty", "");
  EXPECT_THAT(input_error_of([&] { read_idx(empty.string()); }),
              HasSubstr("too short for an IDX header: 0 bytes"));
  const fs::path cut = dir.write("cut", header({60000, 28, 28}).substr(0, 9));
  const std::string message = input_error_of([&] { read_idx(cut.string()); });
  EXPECT_THAT(message, HasSubstr(cut.string()));
  EXPECT_THAT(message, HasSubstr("rank 3 needs 12 bytes of dimensions, found 5"));
}

TEST(Idx, UnsupportedTypeNamesTheCode) {
  TempDir dir;
  std::string bytes = header({2}) + std::string(8, '\0');
  bytes[2] = '\x0D';  // float32
  const fs::path path = dir.write("floats", bytes);
  const std::string message = input_error_of([&] { read_idx(path.string()); });
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("element type 0x0d (float32)"));
  EXPECT_THAT(message, HasSubstr("only type 0x08 (unsigned byte)"));
  bytes[2] = '\x42';
  EXPECT_THAT(input_error_of([&] { read_idx(dir.write("odd", bytes).string()); }),
              HasSubstr("element type 0x42 (not an IDX type)"));
  bytes = header({});
  EXPECT_THAT(input_error_of([&] { read_idx(dir.write("rank0", bytes).string()); }),
              HasSubstr("rank 0"));
}

TEST(Idx, DataShorterThanTheDimensionsPromise) {
  TempDir dir;
  const std::string bytes = header({10, 10}) + std::string(50, 'x');
  const fs::path raw = dir.write("short", bytes);
  const fs::path compressed = dir.write("short.gz", gzip(bytes));
  for (const fs::path& path : {raw, compressed}) {
    const std::string message = input_error_of([&] { read_idx(path.string()); });
    EXPECT_THAT(message, HasSubstr(path.string()));
    EXPECT_THAT(message, HasSubstr("too short: its header (10x10) promises 100 data bytes, "
                                   "found 50"));
  }
}

TEST(Idx, TrailingBytesAreAnInputError) {
  TempDir dir;
  const std::string bytes = idx_bytes(small_array()) + "abc";
  const fs::path raw = dir.write("trailing", bytes);
  const fs::path compressed = dir.write("trailing.gz", gzip(bytes));
  for (const fs::path& path : {raw, compressed}) {
    const std::string message = input_error_of([&] { read_idx(path.string()); });
    EXPECT_THAT(message, HasSubstr(path.string()));
    EXPECT_THAT(message, HasSubstr("3 extra bytes after the 24 data bytes"));
    EXPECT_THAT(message, HasSubstr("(2x3x4)"));
  }
}

TEST(Idx, AbsurdDimensionsFailBeforeAllocating) {
  TempDir dir;
  // 2^96 elements: the product would overflow int64; only the header is present.
  const std::string bytes = header({0xffffffffu, 0xffffffffu, 0xffffffffu});
  for (const std::string& content : {bytes, gzip(bytes)}) {
    const fs::path path = dir.write("absurd", content);
    const std::string message = input_error_of([&] { read_idx(path.string()); });
    EXPECT_THAT(message, HasSubstr(path.string()));
    EXPECT_THAT(message, HasSubstr("dimensions 4294967295x4294967295x4294967295"));
    EXPECT_THAT(message, HasSubstr("more than the limit of 4,294,967,296 bytes"));
  }
  // A lower limit applies the same way.
  const fs::path small = dir.write("small", idx_bytes(small_array()));
  EXPECT_THAT(input_error_of([&] { read_idx(small.string(), 23); }),
              HasSubstr("more than the limit of 23 bytes"));
  EXPECT_EQ(read_idx(small.string(), 24).dims, (std::vector<int64_t>{2, 3, 4}));
}

TEST(Idx, RealFashionMnistFiles) {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir / "train-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed: apt-get install dataset-fashion-mnist";
  const auto start = std::chrono::steady_clock::now();
  const IdxArray images = read_idx((dir / "train-images-idx3-ubyte.gz").string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "read_idx train-images-idx3-ubyte.gz (47,040,000 bytes): " << seconds << " s\n";
  EXPECT_EQ(images.dims, (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(images.data.sizes(), (std::vector<int64_t>{60000, 28, 28}));
  // The first training image's pixel sum and maximum (looked up with Python's gzip module).
  EXPECT_EQ(images.data[0].sum().item<int64_t>(), 76247);
  EXPECT_EQ(images.data[0].max().item<int64_t>(), 255);

  const IdxArray labels = read_idx((dir / "train-labels-idx1-ubyte.gz").string());
  EXPECT_EQ(labels.dims, std::vector<int64_t>{60000});
  EXPECT_TRUE(torch::equal(labels.data.slice(0, 0, 10),
                           torch::tensor({9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, torch::kByte)));
  const IdxArray test_labels = read_idx((dir / "t10k-labels-idx1-ubyte.gz").string());
  EXPECT_EQ(test_labels.dims, std::vector<int64_t>{10000});
  EXPECT_EQ(test_labels.data[0].item<int64_t>(), 9);
}

}  // namespace
}  // namespace bigbatch::data
