#include "bigbatch/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <system_error>

#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"

namespace bigbatch::data {
namespace {

/// Closes a zlib file handle.
struct GzClose {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzClose>;

/// Largest single gzread: its length is an unsigned int and its result an int.
constexpr int64_t kMaxChunk = int64_t{1} << 30;

std::string hex_byte(unsigned value) {
  static const char* digits = "0123456789abcdef";
  return {digits[(value >> 4) & 0xf], digits[value & 0xf]};
}

std::string hex_bytes(const uint8_t* bytes, int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i)
    out += (i > 0 ? " " : "") + hex_byte(bytes[i]);
  return out;
}

std::string type_name(unsigned code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "not an IDX type";
  }
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i > 0 ? "x" : "") + std::to_string(dims[i]);
  return out;
}

/// An open IDX file, gzip-compressed or raw (zlib reads a file without the gzip magic as is).
class IdxReader {
 public:
  explicit IdxReader(const std::string& path) : path_(path) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      const std::string cause =
          errno != 0 ? std::error_code(errno, std::generic_category()).message() : "open failed";
      throw InputError(cat("cannot open IDX file '", path, "': ", cause));
    }
    gzbuffer(file_.get(), 1 << 17);
    raw_ = gzdirect(file_.get()) == 1;
  }

  /// Whether the file is read as is (no gzip magic).
  bool raw() const { return raw_; }
  /// "gzip-compressed IDX file" or "IDX file", for messages.
  std::string kind() const { return raw_ ? "IDX file" : "gzip-compressed IDX file"; }

  /// Reads up to `n` bytes into `buffer` and returns how many it read; fewer than `n` only at
  /// the end of the data. Throws InputError when the file or the gzip stream is broken,
  /// including a gzip stream that ends before its end marker and checksum.
  int64_t read(uint8_t* buffer, int64_t n) {
    int64_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min(n - got, kMaxChunk));
      const int count = gzread(file_.get(), buffer + got, chunk);
      if (count <= 0) {
        check_stream(got);
        break;
      }
      got += count;
      total_ += count;
    }
    return got;
  }

 private:
  /// After gzread returned nothing: throws unless that was the clean end of the data.
  void check_stream(int64_t got_now) {
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    if (code == Z_OK)
      return;
    // zlib prefixes its messages with "<path>: "; the messages below name the path themselves.
    std::string cause = message != nullptr ? message : "zlib error";
    if (cause.rfind(path_ + ": ", 0) == 0)
      cause.erase(0, path_.size() + 2);
    if (raw_ || code == Z_ERRNO)
      throw InputError(cat("cannot read IDX file '", path_, "': ", cause));
    throw InputError(cat("gzip stream of '", path_, "' is truncated or corrupt: ", cause,
                         " (after ", group_thousands(total_ + got_now), " decompressed bytes)"));
  }

  std::string path_;
  GzFile file_;
  bool raw_ = false;
  int64_t total_ = 0;
};

/// Checks the 4-byte magic and returns the rank.
int64_t read_magic(IdxReader& reader, const std::string& path) {
  std::array<uint8_t, 4> magic{};
  const int64_t got = reader.read(magic.data(), 4);
  BB_CHECK_INPUT(got == 4, reader.kind(), " '", path, "' is too short for an IDX header: ", got,
                 " bytes, expected at least 4 (00 00 type rank)");
  BB_CHECK_INPUT(magic[0] == 0 && magic[1] == 0, "wrong magic in ", reader.kind(), " '", path,
                 "': found bytes ", hex_bytes(magic.data(), 4),
                 ", expected 00 00 then the type and rank bytes (IDX; for unsigned bytes 00 00 "
                 "08 rank)");
  BB_CHECK_INPUT(magic[2] == kIdxUnsignedByte, "IDX file '", path, "' has element type 0x",
                 hex_byte(magic[2]), " (", type_name(magic[2]),
                 "); only type 0x08 (unsigned byte) is supported");
  BB_CHECK_INPUT(magic[3] >= 1, "IDX file '", path, "' has rank 0; expected at least 1 dimension");
  return magic[3];
}

/// Reads `rank` big-endian uint32 dimensions.
std::vector<int64_t> read_dims(IdxReader& reader, const std::string& path, int64_t rank) {
  std::vector<uint8_t> bytes(static_cast<size_t>(4 * rank));
  const int64_t got = reader.read(bytes.data(), 4 * rank);
  BB_CHECK_INPUT(got == 4 * rank, "IDX header of '", path, "' ends early: rank ", rank, " needs ",
                 4 * rank, " bytes of dimensions, found ", got);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    const uint8_t* b = bytes.data() + 4 * d;
    dims.push_back((int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3]);
  }
  return dims;
}

/// The number of elements, checked against `max_bytes` without overflowing.
int64_t element_count(const std::vector<int64_t>& dims, const std::string& path,
                      int64_t max_bytes) {
  if (std::find(dims.begin(), dims.end(), 0) != dims.end())
    return 0;
  int64_t count = 1;
  for (const int64_t dim : dims) {
    BB_CHECK_INPUT(count <= max_bytes / dim, "IDX file '", path, "' has dimensions ",
                   dims_text(dims), ", more than the limit of ", group_thousands(max_bytes),
                   " bytes; the header is corrupt or the file is not IDX");
    count *= dim;
  }
  return count;
}

/// For a raw file the size is known before reading: checks it against the header.
void check_raw_size(const std::string& path, const std::vector<int64_t>& dims, int64_t expected) {
  std::error_code error;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (error)
    return;  // not a plain file (a pipe, say): the reads below still check
  const int64_t header = 4 + 4 * static_cast<int64_t>(dims.size());
  const int64_t found = size - header;
  BB_CHECK_INPUT(found >= expected, "IDX file '", path, "' is too short: its header (",
                 dims_text(dims), ") promises ", group_thousands(expected), " data bytes, found ",
                 group_thousands(found));
  BB_CHECK_INPUT(found == expected, "IDX file '", path, "' has ", group_thousands(found - expected),
                 " extra bytes after the ", group_thousands(expected), " data bytes its header (",
                 dims_text(dims), ") promises");
}

}  // namespace

IdxArray read_idx(const std::string& path, int64_t max_bytes) {
  BB_CHECK_INPUT(max_bytes >= 1, "read_idx max_bytes must be at least 1, got ", max_bytes);
  IdxReader reader(path);
  const int64_t rank = read_magic(reader, path);
  std::vector<int64_t> dims = read_dims(reader, path, rank);
  const int64_t expected = element_count(dims, path, max_bytes);
  if (reader.raw())
    check_raw_size(path, dims, expected);

  torch::Tensor data = torch::empty(dims, torch::kByte);  // shaped `dims`, uint8
  const int64_t got = reader.read(data.data_ptr<uint8_t>(), expected);
  BB_CHECK_INPUT(got == expected, reader.kind(), " '", path, "' is too short: its header (",
                 dims_text(dims), ") promises ", group_thousands(expected), " data bytes, found ",
                 group_thousands(got));

  // Reading past the data also makes zlib verify the gzip stream's end marker and checksum.
  std::vector<uint8_t> probe(1 << 16);
  int64_t extra = 0;
  for (int64_t n; (n = reader.read(probe.data(), static_cast<int64_t>(probe.size()))) > 0;)
    extra += n;
  BB_CHECK_INPUT(extra == 0, reader.kind(), " '", path, "' has ", group_thousands(extra),
                 " extra bytes after the ", group_thousands(expected), " data bytes its header (",
                 dims_text(dims), ") promises");
  return {std::move(dims), std::move(data)};
}

std::string idx_bytes(const torch::Tensor& data) {
  BB_CHECK(data.scalar_type() == torch::kByte, "idx_bytes needs uint8 data, got ",
           data.scalar_type());
  BB_CHECK(data.dim() >= 1 && data.dim() <= 255, "idx_bytes needs rank 1..255, got ", data.dim());
  const torch::Tensor contiguous = data.contiguous();
  std::string out = {'\0', '\0', static_cast<char>(kIdxUnsignedByte),
                     static_cast<char>(data.dim())};
  for (const int64_t dim : data.sizes()) {
    BB_CHECK(dim >= 0 && dim <= 0xffffffffLL, "IDX dimension out of range: ", dim);
    for (int shift = 24; shift >= 0; shift -= 8)
      out += static_cast<char>((dim >> shift) & 0xff);
  }
  const auto* bytes = reinterpret_cast<const char*>(contiguous.data_ptr<uint8_t>());
  out.append(bytes, static_cast<size_t>(contiguous.numel()));
  return out;
}

}  // namespace bigbatch::data
