#include "bigbatch/engine/window_feed.h"

#include <utility>
#include <vector>

namespace bigbatch::engine {

WindowFeed::WindowFeed(const data::Dataset& data, const Plan& plan, uint64_t seed, int64_t depth,
                       DataPosition start, int64_t rank)
    : sampler_(data.size(), plan.global_batch, seed, start),
      prefetcher_(data, depth),
      rank_(rank) {}

Window WindowFeed::take(const Plan& plan) {
  if (ahead_.empty())
    draw(plan);
  Window window = std::move(ahead_.front());
  ahead_.pop_front();
  return window;
}

void WindowFeed::look_ahead(const Plan& plan, int64_t windows) {
  while (static_cast<int64_t>(ahead_.size()) < windows &&
         prefetcher_.pending() < prefetcher_.depth())
    draw(plan);
}

void WindowFeed::restart(const Window& current, const Plan& plan) {
  prefetcher_.clear();
  request(current, plan);
  for (const Window& window : ahead_)
    request(window, plan);
}

void WindowFeed::draw(const Plan& plan) {
  ahead_.push_back(sampler_.next());
  request(ahead_.back(), plan);
}

void WindowFeed::request(const Window& window, const Plan& plan) {
  const ShardRange shard =
      shard_range(static_cast<int64_t>(window.indices.size()), rank_, plan.world_size);
  auto begin = window.indices.begin() + shard.begin;
  for (const int64_t size : plan.split_window(shard.size())) {
    prefetcher_.request(std::vector<int64_t>(begin, begin + size));
    begin += size;
  }
}

}  // namespace bigbatch::engine
