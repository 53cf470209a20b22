#include "bigbatch/engine/window_sampler.h"

#include <algorithm>

#include "bigbatch/core/check.h"
#include "bigbatch/data/shuffle.h"

namespace bigbatch::engine {

ShardRange shard_range(int64_t count, int64_t rank, int64_t world_size) {
  BB_CHECK(world_size >= 1 && rank >= 0 && rank < world_size && count >= 0, "shard ", rank, " of ",
           world_size, " of ", count, " items");
  const int64_t base = count / world_size;
  const int64_t extra = count % world_size;
  ShardRange range;
  range.begin = rank * base + std::min(rank, extra);
  range.end = range.begin + base + (rank < extra ? 1 : 0);
  return range;
}

WindowSampler::WindowSampler(int64_t dataset_size, int64_t global_batch, uint64_t seed,
                             DataPosition start)
    : dataset_size_(dataset_size),
      global_batch_(global_batch),
      seed_(seed),
      epoch_(start.epoch),
      cursor_(start.cursor) {
  BB_CHECK_INPUT(dataset_size > 0, "the training set is empty");
  BB_CHECK(global_batch > 0, "global batch ", global_batch);
  BB_CHECK_INPUT(start.epoch >= 0 && start.cursor >= 0 && start.cursor <= dataset_size,
                 "data position (epoch ", start.epoch, ", sample ", start.cursor,
                 ") lies outside a training set of ", dataset_size, " samples");
  order_ = data::epoch_permutation(dataset_size_, seed_, epoch_);
}

Window WindowSampler::next() {
  if (cursor_ == dataset_size_) {
    ++epoch_;
    cursor_ = 0;
    order_ = data::epoch_permutation(dataset_size_, seed_, epoch_);
  }
  const int64_t take = std::min(global_batch_, dataset_size_ - cursor_);
  Window window;
  window.epoch = epoch_;
  window.start = cursor_;
  window.indices.assign(order_.begin() + cursor_, order_.begin() + cursor_ + take);
  cursor_ += take;
  return window;
}

int64_t WindowSampler::windows_per_epoch() const {
  return (dataset_size_ + global_batch_ - 1) / global_batch_;
}

}  // namespace bigbatch::engine
