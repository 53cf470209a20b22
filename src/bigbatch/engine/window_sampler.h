// Draws accumulation windows of sample indices, epoch by epoch, in a seeded order.
#pragma once

#include <cstdint>
#include <vector>

namespace bigbatch::engine {

/// One window of sample indices.
struct Window {
  int64_t epoch = 0;             ///< 0-based epoch the indices come from
  std::vector<int64_t> indices;  ///< global_batch indices, fewer for the last window of an epoch
};

/// Walks a fresh permutation of [0, dataset_size) every epoch (see data::epoch_permutation) and
/// cuts it into windows of `global_batch` indices. The last window of an epoch holds what is left
/// (dataset_size % global_batch samples when that is not zero): no sample is dropped or repeated.
class WindowSampler {
 public:
  WindowSampler(int64_t dataset_size, int64_t global_batch, uint64_t seed);
  /// The next window; starts the next epoch when the current one is used up.
  Window next();
  /// Windows in one epoch: ceil(dataset_size / global_batch).
  int64_t windows_per_epoch() const;

 private:
  int64_t dataset_size_;
  int64_t global_batch_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  int64_t cursor_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace bigbatch::engine
