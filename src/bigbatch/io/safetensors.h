// The safetensors file format (https://github.com/huggingface/safetensors): named tensors and
// string metadata in one file that Python, Rust and C++ tools read without running code.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch::io {

/// A tensor with its name, as stored in a safetensors file.
using NamedTensor = std::pair<std::string, torch::Tensor>;

/// The content of a safetensors file: tensors in the order of the file's header, and metadata.
struct Safetensors {
  /// The tensors, (name, CPU tensor), in header order (the order they were written in).
  std::vector<NamedTensor> tensors;
  /// The `__metadata__` entries (string to string); empty when the file has none.
  std::map<std::string, std::string> metadata;

  /// The tensor called `name`, or nullptr.
  const torch::Tensor* find(const std::string& name) const;
};

/// The safetensors dtype code of `dtype`: "F64", "F32", "F16", "BF16", "I64", "I32", "I16",
/// "I8", "U8" or "BOOL". Throws InputError naming the dtype for any other.
std::string safetensors_dtype(torch::Dtype dtype);

/// The bytes of a safetensors file holding `tensors` (in this order) and `metadata`:
///   8 bytes  N, the header's length, little-endian uint64
///   N bytes  JSON header {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets":
///            [begin, end]}, ...}, padded with spaces so that N is a multiple of 8
///   the tensors' bytes, row-major and little-endian, one after the other; data_offsets count
///            from the first byte after the header
/// The `__metadata__` entry is left out when `metadata` is empty. Tensors may live on any device
/// and need not be contiguous. Throws InputError for a duplicate or empty name, the reserved name
/// "__metadata__", or a dtype safetensors_dtype does not know (naming the tensor).
std::string safetensors_bytes(const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

/// Writes safetensors_bytes(tensors, metadata) to `path` atomically (write_file_atomically): a
/// reader sees the old file or the whole new one. Usage:
///   write_safetensors("model.safetensors", {{"w", torch::ones({2, 3})}}, {{"format", "pt"}});
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Reads the safetensors file at `path` into memory (CPU tensors that own their data). Throws
/// InputError naming the file and the cause when it cannot be read or is not valid safetensors
/// (see parse_safetensors).
Safetensors read_safetensors(const std::string& path);

/// Maps the safetensors file at `path` into memory instead of reading it: the tensors view the
/// mapping (copy-on-write: writing one copies its pages and never changes the file), which the
/// last of them unmaps; pages are read from disk when first touched. For large checkpoints that
/// are converted or copied into a model once. Checks and errors as read_safetensors.
Safetensors map_safetensors(const std::string& path);

/// Parses the bytes of a safetensors file; `origin` (a path) starts every error message.
/// Throws InputError when the bytes are fewer than the 8 of the header length; the header length
/// runs past the end; the header is not valid JSON or not an object; an entry lacks a string
/// `dtype`, a `shape` of non-negative integers or `data_offsets` [begin, end] with begin <= end;
/// the dtype is unknown (the supported ones are listed); end lies beyond the data; end - begin is
/// not the shape's element count x the dtype's size; two tensors' bytes overlap; bytes of the
/// data belong to no tensor; or `__metadata__` is not an object of strings.
Safetensors parse_safetensors(const std::string& bytes, const std::string& origin);

}  // namespace bigbatch::io
