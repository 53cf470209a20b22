// Draws accumulation windows of sample indices, epoch by epoch, in a seeded order.
#pragma once

#include <cstdint>
#include <vector>

namespace bigbatch::engine {

/// A place in the data order: the next window starts at `cursor` in epoch `epoch`'s permutation.
/// A cursor equal to the dataset size means the epoch is used up (the next window starts the
/// next epoch).
struct DataPosition {
  int64_t epoch = 0;
  int64_t cursor = 0;
  bool operator==(const DataPosition& other) const {
    return epoch == other.epoch && cursor == other.cursor;
  }
};

/// One window of sample indices.
struct Window {
  int64_t epoch = 0;             ///< 0-based epoch the indices come from
  int64_t start = 0;             ///< position of indices[0] in the epoch's permutation
  std::vector<int64_t> indices;  ///< global_batch indices, fewer for the last window of an epoch
  /// Where the window after this one starts.
  DataPosition end() const { return {epoch, start + static_cast<int64_t>(indices.size())}; }
};

/// The items [begin, end) of `count` that rank `rank` of `world_size` takes: contiguous, in rank
/// order, sizes differing by at most one (the first count % world_size ranks take one more), so
/// that the shards of all ranks together are the items in their order.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange shard_range(int64_t count, int64_t rank, int64_t world_size);

/// Walks a fresh permutation of [0, dataset_size) every epoch (see data::epoch_permutation) and
/// cuts it into windows of `global_batch` indices. The last window of an epoch holds what is left
/// (dataset_size % global_batch samples when that is not zero): no sample is dropped or repeated.
class WindowSampler {
 public:
  /// Starts at `start` (default: the beginning of epoch 0). Throws InputError for a position
  /// outside the data (a cursor beyond dataset_size, a negative epoch).
  WindowSampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, DataPosition start = {});
  /// The next window; starts the next epoch when the current one is used up.
  Window next();
  /// Windows in one epoch: ceil(dataset_size / global_batch).
  int64_t windows_per_epoch() const;

 private:
  int64_t dataset_size_;
  int64_t global_batch_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace bigbatch::engine
