// Next-byte prediction over fixed-length byte sequences.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

/// Settings of a SequenceDataset: `SequenceDatasetOptions(64).name("train")`.
struct SequenceDatasetOptions {
  /// Sequences of `context` bytes.
  explicit SequenceDatasetOptions(int64_t context) : context_(context) {}
  /// Bytes per sequence, T (at least 1).
  TORCH_ARG(int64_t, context);
  /// Target value at padded positions of the final, partial sequence; the loss skips it.
  TORCH_ARG(int64_t, ignore_index) = -100;
  /// What the bytes are, for error messages, for example "corpus split 'val'".
  TORCH_ARG(std::string, name) = "byte data";
};

/// Next-byte prediction over consecutive sequences of T = context bytes. Sample i covers bytes
/// [i*T, i*T + T] (T + 1 bytes; consecutive samples share one byte): inputs are
/// bytes[i*T .. i*T + T - 1] and targets bytes[i*T + 1 .. i*T + T]. The final, partial sample is
/// kept when it has at least 2 bytes; its missing inputs are 0 and its missing targets are
/// ignore_index. Usage:
///   SequenceDataset train(corpus.train_shared(), SequenceDatasetOptions(64).name("train"));
///   Batch batch = train.get({0, 5, 7});  // inputs (3, 64), targets (3, 64), int64
class SequenceDataset : public Dataset {
 public:
  /// Shares `bytes` without copying. Throws InputError naming the sizes when there are fewer
  /// than 2 bytes or context < 1.
  SequenceDataset(std::shared_ptr<const std::vector<uint8_t>> bytes,
                  const SequenceDatasetOptions& options);
  /// Takes ownership of `bytes`.
  SequenceDataset(std::vector<uint8_t> bytes, const SequenceDatasetOptions& options);

  /// Number of sequences: (n - 2) / T + 1 for n bytes.
  int64_t size() const override;
  /// inputs (B, T) int64 byte ids, targets (B, T) int64 byte ids or ignore_index. An index
  /// outside [0, size()) throws std::logic_error (a bug in the caller, not in the data).
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "1,234 sequences of 64 bytes (78,977 bytes)"; the last number is the byte count.
  std::string describe() const override;

  /// The options the dataset was made with.
  const SequenceDatasetOptions& options() const { return options_; }
  /// The bytes the samples are cut from.
  const std::vector<uint8_t>& bytes() const { return *bytes_; }

 private:
  std::shared_ptr<const std::vector<uint8_t>> bytes_;
  SequenceDatasetOptions options_;
};

}  // namespace bigbatch::data
