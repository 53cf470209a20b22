#include "bigbatch/memory/block_cache.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace bigbatch::memory {

size_t BlockCache::capacity_for(size_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

Block BlockCache::take(size_t capacity, size_t alignment) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) {
    auto fit = cached_blocks_.lower_bound(capacity);
    if (fit != cached_blocks_.end() && fit->first <= capacity + capacity / 8) {
      fit = std::prev(cached_blocks_.upper_bound(fit->first));  // the last freed: warm in cache
      const Block block{fit->second, fit->first};
      cached_blocks_.erase(fit);
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
  cached_blocks_.emplace(block.capacity, block.base);
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
  while (!cached_blocks_.empty() && live_ + cached_ + room > limit) {
    const auto largest = std::prev(cached_blocks_.end());
    std::free(largest->second);
    cached_ -= largest->first;
    cached_blocks_.erase(largest);
  }
}

void BlockCache::free_all() {
  for (const auto& [capacity, base] : cached_blocks_)
    std::free(base);
  cached_blocks_.clear();
  cached_ = 0;
}

}  // namespace bigbatch::memory
