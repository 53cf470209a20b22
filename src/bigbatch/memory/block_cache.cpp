#include "bigbatch/memory/block_cache.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace bigbatch::memory {

size_t BlockCache::capacity_for(size_t bytes) {
  size_t step = kPage;
  if (bytes > kClassSteps * kPage) {
    size_t power = kClassSteps * kPage;  // the largest power of two at or below `bytes`
    while (power <= bytes / 2)
      power *= 2;
    step = power / kClassSteps;
  }
  return (bytes + step - 1) / step * step;
}

Block BlockCache::take(size_t capacity, size_t alignment) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) {
    // The smallest capacity cached that holds `capacity`, within an eighth more.
    const size_t most = capacity + capacity / 8;
    for (auto fit = cached_blocks_.lower_bound(capacity);
         fit != cached_blocks_.end() && fit->first <= most; ++fit) {
      if (fit->second.empty())
        continue;
      const Block block{pop(fit->second), fit->first};  // the last freed: warm in cache
      cached_ -= block.capacity;
      live_ += block.capacity;
      ++hits_;
      return block;
    }
  }
  high_water_ = std::max(high_water_, live_ + capacity);
  free_until_room_for(capacity);
  void* base = nullptr;
  if (posix_memalign(&base, alignment, capacity) != 0) {
    free_all();
    if (posix_memalign(&base, alignment, capacity) != 0)
      return {};
  }
  live_ += capacity;
  return {base, capacity};
}

void BlockCache::give(Block block) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_ -= block.capacity;
  if (!enabled_) {
    std::free(block.base);
    return;
  }
  if (empty_stacks_ > kMostEmptyStacks) {
    for (auto it = cached_blocks_.begin(); it != cached_blocks_.end();)
      it = it->second.empty() ? cached_blocks_.erase(it) : std::next(it);
    empty_stacks_ = 0;
  }
  const auto [stack, added] = cached_blocks_.try_emplace(block.capacity);
  empty_stacks_ -= !added && stack->second.empty() ? 1 : 0;
  stack->second.push_back(block.base);
  cached_ += block.capacity;
}

void BlockCache::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  enabled_ = enabled;
  if (!enabled)
    free_all();
}

bool BlockCache::enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enabled_;
}

void BlockCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_all();
}

int64_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(cached_);
}

int64_t BlockCache::live_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(live_);
}

int64_t BlockCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

void BlockCache::free_until_room_for(size_t room) {
  const size_t limit = high_water_ + high_water_ / 2;
  auto largest = cached_blocks_.rbegin();
  while (cached_ > 0 && live_ + cached_ + room > limit) {
    while (largest->second.empty())  // cached_ > 0: a stack further down holds a block
      ++largest;
    std::free(pop(largest->second));  // the last freed of the largest
    cached_ -= largest->first;
  }
}

void* BlockCache::pop(std::vector<void*>& stack) {
  void* base = stack.back();
  stack.pop_back();
  empty_stacks_ += stack.empty() ? 1 : 0;
  return base;
}

void BlockCache::free_all() {
  for (const auto& [capacity, bases] : cached_blocks_)
    for (void* base : bases)
      std::free(base);
  cached_blocks_.clear();
  empty_stacks_ = 0;
  cached_ = 0;
}

}  // namespace bigbatch::memory
