#include "bigbatch/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "bigbatch/core/check.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/io/read_file.h"

// Tensor bytes are copied as they are in memory; safetensors stores them little-endian.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bigbatch's safetensors reader and writer assume a little-endian host"
#endif

namespace bigbatch::io {
namespace {

/// Bytes of the header-length field at the start of the file.
constexpr size_t kLengthBytes = 8;
/// The header's reserved key for string metadata.
constexpr const char* kMetadataKey = "__metadata__";

/// The dtypes bigbatch reads and writes, with their safetensors codes.
const std::vector<std::pair<std::string, torch::Dtype>>& dtype_table() {
  static const std::vector<std::pair<std::string, torch::Dtype>> table = {
      {"F64", torch::kFloat64},   {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
      {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},   {"I32", torch::kInt32},
      {"I16", torch::kInt16},     {"I8", torch::kInt8},     {"U8", torch::kUInt8},
      {"BOOL", torch::kBool}};
  return table;
}

std::string supported_codes() {
  std::string codes;
  for (const auto& [code, dtype] : dtype_table())
    codes += (codes.empty() ? "" : ", ") + code;
  return codes;
}

/// One tensor's header entry, checked.
struct Entry {
  std::string name;
  torch::Dtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// The header entry `value` of tensor `name`, with its fields' types and its size checked.
Entry parse_entry(const std::string& name, const nlohmann::ordered_json& value,
                  const std::string& origin) {
  const std::string where = cat(origin, ": tensor \"", name, "\"");
  BB_CHECK_INPUT(value.is_object(), where, ": header entry is not an object but ", value.dump());
  Entry entry;
  entry.name = name;
  const auto dtype = value.find("dtype");
  BB_CHECK_INPUT(dtype != value.end() && dtype->is_string(), where,
                 ": header entry has no string \"dtype\"");
  const std::string code = dtype->get<std::string>();
  const auto& table = dtype_table();
  const auto known = std::find_if(table.begin(), table.end(),
                                  [&](const auto& pair) { return pair.first == code; });
  BB_CHECK_INPUT(known != table.end(), where, ": unknown dtype \"", code,
                 "\" (supported: ", supported_codes(), ")");
  entry.dtype = known->second;
  const auto shape = value.find("shape");
  BB_CHECK_INPUT(shape != value.end() && shape->is_array(), where,
                 ": header entry has no \"shape\" array");
  for (const auto& size : *shape) {
    BB_CHECK_INPUT(size.is_number_unsigned(), where,
                   ": shape must hold non-negative integers, got ", shape->dump());
    entry.shape.push_back(size.get<int64_t>());
  }
  const auto offsets = value.find("data_offsets");
  BB_CHECK_INPUT(offsets != value.end() && offsets->is_array() && offsets->size() == 2 &&
                     (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
                 where, ": header entry has no \"data_offsets\" [begin, end] of two integers");
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  BB_CHECK_INPUT(entry.begin <= entry.end, where, ": data_offsets [", entry.begin, ", ", entry.end,
                 "] end before they begin");
  // Element counts from a hostile header could overflow: compute in long double first.
  long double bytes = static_cast<long double>(c10::elementSize(entry.dtype));
  for (const int64_t size : entry.shape)
    bytes *= static_cast<long double>(size);
  const uint64_t held = entry.end - entry.begin;
  BB_CHECK_INPUT(bytes == static_cast<long double>(held), where, ": shape ",
                 shape_text(entry.shape), " x ", code, " (", c10::elementSize(entry.dtype),
                 " bytes) needs ", static_cast<double>(bytes), " bytes, but data_offsets [",
                 entry.begin, ", ", entry.end, "] hold ", held);
  return entry;
}

/// Checks that the entries tile the data section [0, data_size) exactly: no byte of two tensors,
/// none beyond the data, none of no tensor.
void check_layout(std::vector<const Entry*> entries, uint64_t data_size,
                  const std::string& origin) {
  for (const Entry* entry : entries) {
    BB_CHECK_INPUT(entry->end <= data_size, origin, ": tensor \"", entry->name,
                   "\": data_offsets [", entry->begin, ", ", entry->end,
                   "] run past the end of the data (", data_size,
                   " bytes after the header; is the file truncated?)");
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* entry : entries) {
    BB_CHECK_INPUT(entry->begin >= covered, origin, ": tensor \"", entry->name,
                   "\": data_offsets [", entry->begin, ", ", entry->end,
                   "] overlap those of tensor \"", previous ? previous->name : "", "\" [",
                   previous ? previous->begin : 0, ", ", covered, "]");
    BB_CHECK_INPUT(entry->begin == covered, origin, ": data bytes [", covered, ", ", entry->begin,
                   ") before tensor \"", entry->name, "\" belong to no tensor");
    covered = entry->end;
    previous = entry;
  }
  BB_CHECK_INPUT(covered == data_size, origin, ": data bytes [", covered, ", ", data_size,
                 ") after the last tensor belong to no tensor");
}

std::map<std::string, std::string> parse_metadata(const nlohmann::ordered_json& value,
                                                  const std::string& origin) {
  BB_CHECK_INPUT(value.is_object(), origin, ": \"", kMetadataKey,
                 "\" must be an object of strings, got ", value.dump());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, text] : value.items()) {
    BB_CHECK_INPUT(text.is_string(), origin, ": \"", kMetadataKey, "\" entry \"", key,
                   "\" must be a string, got ", text.dump());
    metadata[key] = text.get<std::string>();
  }
  return metadata;
}

/// A safetensors file's header and where its data starts, checked (see parse_safetensors).
struct ParsedFile {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  ///< in header order
  const char* data = nullptr;  ///< the first byte after the header
};

ParsedFile parse_file(const char* bytes, uint64_t size, const std::string& origin) {
  BB_CHECK_INPUT(size >= kLengthBytes, origin, ": not a safetensors file: ", size,
                 " bytes, fewer than the 8 of the header length (truncated?)");
  uint64_t length = 0;
  std::memcpy(&length, bytes, kLengthBytes);
  const uint64_t available = size - kLengthBytes;
  BB_CHECK_INPUT(length <= available, origin, ": header length ", length,
                 " bytes runs past the end of the file (", available,
                 " bytes follow the length; truncated or not safetensors?)");
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(bytes + kLengthBytes, bytes + kLengthBytes + length);
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(cat(origin, ": header is not valid JSON: ", error.what()));
  }
  BB_CHECK_INPUT(header.is_object(), origin, ": header must be a JSON object, got ",
                 header.type_name());
  ParsedFile file;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey)
      file.metadata = parse_metadata(value, origin);
    else
      file.entries.push_back(parse_entry(name, value, origin));
  }
  std::vector<const Entry*> layout;
  for (const Entry& entry : file.entries)
    layout.push_back(&entry);
  check_layout(layout, available - length, origin);
  file.data = bytes + kLengthBytes + length;
  return file;
}

/// A whole file mapped into memory, copy-on-write, unmapped when the object dies.
class FileMapping {
 public:
  explicit FileMapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BB_CHECK_INPUT(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));  // as read_file
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      const int error = errno;
      ::close(fd);
      throw InputError(cat("cannot read ", path, ": ", std::strerror(error)));
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      throw InputError(cat("cannot read ", path, ": not a regular file"));
    }
    size_ = static_cast<uint64_t>(info.st_size);
    if (size_ > 0) {
      void* mapped = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      const int error = errno;
      ::close(fd);
      BB_CHECK_INPUT(mapped != MAP_FAILED, "cannot read ", path,
                     ": mmap failed: ", std::strerror(error));
      data_ = static_cast<const char*>(mapped);
    } else {
      ::close(fd);
    }
  }
  ~FileMapping() {
    if (data_ != nullptr)
      ::munmap(const_cast<char*>(data_), size_);
  }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  const char* data() const { return data_ != nullptr ? data_ : ""; }
  uint64_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace

const torch::Tensor* Safetensors::find(const std::string& name) const {
  for (const auto& [tensor_name, tensor] : tensors) {
    if (tensor_name == name)
      return &tensor;
  }
  return nullptr;
}

std::string safetensors_dtype(torch::Dtype dtype) {
  for (const auto& [code, known] : dtype_table()) {
    if (known == dtype)
      return code;
  }
  throw InputError(
      cat("safetensors cannot hold dtype ", dtype, " (supported: ", supported_codes(), ")"));
}

std::string safetensors_bytes(const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header[kMetadataKey] = metadata;
  std::vector<torch::Tensor> contents;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    BB_CHECK_INPUT(!name.empty() && name != kMetadataKey,
                   "safetensors: a tensor cannot be called \"", name, "\"");
    BB_CHECK_INPUT(names.insert(name).second, "safetensors: two tensors are called \"", name, "\"");
    BB_CHECK_INPUT(tensor.defined(), "safetensors: tensor \"", name, "\" is undefined");
    std::string code;
    try {
      code = safetensors_dtype(tensor.scalar_type());
    } catch (const InputError& error) {
      throw InputError(cat("safetensors: tensor \"", name, "\": ", error.what()));
    }
    const torch::Tensor content = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = content.numel() * content.element_size();
    header[name] = {{"dtype", code},
                    {"shape", content.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contents.push_back(content);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(kLengthBytes, '\0');
  const uint64_t length = text.size();
  std::memcpy(file.data(), &length, kLengthBytes);  // little-endian host (checked above)
  file.reserve(kLengthBytes + text.size() + offset);
  file += text;
  for (const torch::Tensor& content : contents) {
    file.append(static_cast<const char*>(content.data_ptr()),
                static_cast<size_t>(content.numel() * content.element_size()));
  }
  return file;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, safetensors_bytes(tensors, metadata));
}

Safetensors read_safetensors(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());
  }
  return parse_safetensors(bytes, path);
}

Safetensors parse_safetensors(const std::string& bytes, const std::string& origin) {
  const ParsedFile parsed = parse_file(bytes.data(), bytes.size(), origin);
  Safetensors file;
  file.metadata = parsed.metadata;
  for (const Entry& entry : parsed.entries) {
    torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
    if (entry.end > entry.begin)
      std::memcpy(tensor.data_ptr(), parsed.data + entry.begin, entry.end - entry.begin);
    file.tensors.emplace_back(entry.name, tensor);
  }
  return file;
}

Safetensors map_safetensors(const std::string& path) {
  const auto mapping = std::make_shared<FileMapping>(path);
  const ParsedFile parsed = parse_file(mapping->data(), mapping->size(), path);
  Safetensors file;
  file.metadata = parsed.metadata;
  for (const Entry& entry : parsed.entries) {
    // Each tensor keeps the mapping alive; MAP_PRIVATE makes a write copy the page, never
    // touching the file.
    char* data = const_cast<char*>(parsed.data) + entry.begin;
    file.tensors.emplace_back(entry.name, torch::from_blob(
                                              data, entry.shape, [mapping](void*) {},
                                              torch::TensorOptions().dtype(entry.dtype)));
  }
  return file;
}

}  // namespace bigbatch::io
