// Fixed-context next-byte prediction for an n-gram MLP.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

/// Settings of a ContextDataset: `ContextDatasetOptions(8).name("train")`.
struct ContextDatasetOptions {
  /// Contexts of `context` bytes.
  explicit ContextDatasetOptions(int64_t context) : context_(context) {}
  /// Bytes of context per sample, k (at least 1).
  TORCH_ARG(int64_t, context);
  /// What the bytes are, for error messages, for example "corpus split 'val'".
  TORCH_ARG(std::string, name) = "byte data";
};

/// Every window of k = context consecutive bytes with the byte that follows it: sample i has
/// inputs bytes[i .. i + k - 1] and target bytes[i + k], for i in [0, n - k). Usage:
///   ContextDataset train(corpus.train_shared(), ContextDatasetOptions(8).name("train"));
///   Batch batch = train.get({0, 1, 2});  // inputs (3, 8), targets (3,), int64
class ContextDataset : public Dataset {
 public:
  /// Shares `bytes` without copying. Throws InputError naming the sizes when there are fewer
  /// than context + 1 bytes or context < 1.
  ContextDataset(std::shared_ptr<const std::vector<uint8_t>> bytes,
                 const ContextDatasetOptions& options);
  /// Takes ownership of `bytes`.
  ContextDataset(std::vector<uint8_t> bytes, const ContextDatasetOptions& options);

  /// Number of samples: n - k for n bytes.
  int64_t size() const override;
  /// inputs (B, k) int64 byte ids, targets (B,) int64 byte ids. An index outside [0, size())
  /// throws std::logic_error (a bug in the caller, not in the data).
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "1,234 contexts of 8 bytes (1,242 bytes)"; the last number is the byte count.
  std::string describe() const override;

  /// The options the dataset was made with.
  const ContextDatasetOptions& options() const { return options_; }
  /// The bytes the samples are cut from.
  const std::vector<uint8_t>& bytes() const { return *bytes_; }

 private:
  std::shared_ptr<const std::vector<uint8_t>> bytes_;
  ContextDatasetOptions options_;
};

}  // namespace bigbatch::data
