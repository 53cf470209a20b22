// The dataset interface the trainer draws micro-batches from.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch::data {

/// A batch of examples: model inputs and the targets the loss compares against.
struct Batch {
  torch::Tensor inputs;   ///< (B, ...) model inputs, for example (B, T) int64 byte ids
  torch::Tensor targets;  ///< (B, ...) targets, for example (B, T) int64 with ignore_index padding
  /// Number of samples (the leading dimension).
  int64_t size() const { return inputs.size(0); }
};

/// `batch` on `device`: the same tensors when they are there already, else copies. From pinned
/// host memory the copies to a GPU are asynchronous on the current stream, which orders them
/// before the kernels that read them.
Batch to_device(const Batch& batch, const torch::Device& device);

/// A finite, indexable collection of samples. Implementations are immutable after construction,
/// so one dataset may be read from several threads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// Stacks the samples at `indices` (each in [0, size())) into one batch, in that order.
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
  /// One line for the plan table, for example "3,412 sequences of 64 bytes".
  virtual std::string describe() const = 0;
  /// Indices of `count` samples (at most size()) that together cost a model the most work and
  /// memory, for trials of a micro-batch size (job::search_micro_batch). Default: the first
  /// `count`, for datasets whose samples all cost the same.
  virtual std::vector<int64_t> costliest_samples(int64_t count) const;
};

}  // namespace bigbatch::data
