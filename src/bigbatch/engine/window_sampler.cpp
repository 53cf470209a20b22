#include "bigbatch/engine/window_sampler.h"

#include <algorithm>

#include "bigbatch/core/check.h"
#include "bigbatch/data/shuffle.h"

namespace bigbatch::engine {

WindowSampler::WindowSampler(int64_t dataset_size, int64_t global_batch, uint64_t seed)
    : dataset_size_(dataset_size), global_batch_(global_batch), seed_(seed) {
  BB_CHECK_INPUT(dataset_size > 0, "the training set is empty");
  BB_CHECK(global_batch > 0, "global batch ", global_batch);
}

Window WindowSampler::next() {
  if (epoch_ < 0 || cursor_ == dataset_size_) {
    ++epoch_;
    cursor_ = 0;
    order_ = data::epoch_permutation(dataset_size_, seed_, epoch_);
  }
  const int64_t take = std::min(global_batch_, dataset_size_ - cursor_);
  Window window;
  window.epoch = epoch_;
  window.indices.assign(order_.begin() + cursor_, order_.begin() + cursor_ + take);
  cursor_ += take;
  return window;
}

int64_t WindowSampler::windows_per_epoch() const {
  return (dataset_size_ + global_batch_ - 1) / global_batch_;
}

}  // namespace bigbatch::engine
