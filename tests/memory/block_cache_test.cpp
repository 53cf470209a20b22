#include "bigbatch/memory/block_cache.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "memory/tracker_fixture.h"

namespace bigbatch {
namespace {

using memory::Block;
using memory::BlockCache;
using testing::TrackerTest;

constexpr size_t kPage = BlockCache::kPage;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kAlignment = 64;

TEST(BlockCache, CapacitiesAreWholePages) {
  EXPECT_EQ(BlockCache::capacity_for(1), kPage);
  EXPECT_EQ(BlockCache::capacity_for(kPage), kPage);
  EXPECT_EQ(BlockCache::capacity_for(kPage + 1), 2 * kPage);
  EXPECT_EQ(BlockCache::capacity_for(8 * kPage), 8 * kPage);
  EXPECT_EQ(BlockCache::capacity_for(8 * kPage + 1), 9 * kPage);
}

TEST(BlockCache, LargerCapacitiesStepByAnEighthOfTheirPowerOfTwo) {
  EXPECT_EQ(BlockCache::capacity_for(16 * kPage), 16 * kPage);
  EXPECT_EQ(BlockCache::capacity_for(16 * kPage + 1), 18 * kPage);  // steps of 2 pages
  EXPECT_EQ(BlockCache::capacity_for(kMiB + 1), kMiB + kMiB / 8);
  EXPECT_EQ(BlockCache::capacity_for(2 * kMiB - 1), 2 * kMiB);
  for (size_t bytes = 1; bytes < 64 * kMiB; bytes = bytes * 3 / 2 + 7) {
    const size_t capacity = BlockCache::capacity_for(bytes);
    EXPECT_GE(capacity, bytes);
    EXPECT_LE(capacity, std::max(bytes + bytes / 8, (bytes + kPage - 1) / kPage * kPage)) << bytes;
    EXPECT_EQ(capacity % kPage, 0U) << bytes;
  }
}

TEST(BlockCache, SizesThatDifferALittleShareTheirBlocks) {
  // The activations of packed tokens: (N, C) with N changing a little every micro-batch.
  BlockCache cache;
  const Block ballast = cache.take(64 * kMiB, kAlignment);  // in use: no eviction below
  const size_t row = 384 * 4;                               // one float32 row of width 384
  cache.give(cache.take(BlockCache::capacity_for(263 * row), kAlignment));
  for (const size_t rows : {252, 273, 241, 260, 270}) {
    const Block block = cache.take(BlockCache::capacity_for(rows * row), kAlignment);
    EXPECT_GE(block.capacity, rows * row);
    cache.give(block);
  }
  EXPECT_EQ(cache.hits(), 5);
  cache.give(ballast);
}

TEST(BlockCache, AFreedBlockServesTheNextRequestOfItsSizeLastFreedFirst) {
  BlockCache cache;
  const Block a = cache.take(16 * kPage, kAlignment);
  const Block b = cache.take(16 * kPage, kAlignment);
  ASSERT_NE(a.base, nullptr);
  ASSERT_NE(b.base, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.base) % kAlignment, 0U);
  EXPECT_EQ(cache.live_bytes(), int64_t(32 * kPage));
  cache.give(a);
  cache.give(b);
  EXPECT_EQ(cache.cached_bytes(), int64_t(32 * kPage));
  EXPECT_EQ(cache.live_bytes(), 0);
  const Block again = cache.take(16 * kPage, kAlignment);
  EXPECT_EQ(again.base, b.base);  // freed last
  EXPECT_EQ(again.capacity, 16 * kPage);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.cached_bytes(), int64_t(16 * kPage));
  cache.give(again);
  cache.clear();
  EXPECT_EQ(cache.cached_bytes(), 0);
}

TEST(BlockCache, ABlockServesRequestsUpToAnEighthSmaller) {
  BlockCache cache;
  const Block ballast = cache.take(64 * kPage, kAlignment);  // in use: no eviction below
  cache.give(cache.take(9 * kPage, kAlignment));
  const Block too_small = cache.take(10 * kPage, kAlignment);  // 9 pages < 10
  EXPECT_EQ(cache.hits(), 0);
  const Block fits = cache.take(8 * kPage, kAlignment);  // 9 <= 8 + 8 / 8
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(fits.capacity, 9 * kPage);
  cache.give(fits);
  const Block too_large = cache.take(7 * kPage, kAlignment);  // 9 > 7 + 7 / 8
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(too_large.capacity, 7 * kPage);
  EXPECT_EQ(cache.cached_bytes(), int64_t(9 * kPage));  // not freed for the misses
  cache.give(too_small);
  cache.give(too_large);
  cache.give(ballast);
}

TEST(BlockCache, ASizeWhoseBlocksAreAllTakenIsSkippedForTheNextThatFits) {
  BlockCache cache;
  const Block ballast = cache.take(64 * kPage, kAlignment);  // in use: no eviction below
  const Block eight = cache.take(8 * kPage, kAlignment), nine = cache.take(9 * kPage, kAlignment);
  cache.give(eight);
  cache.give(nine);
  EXPECT_EQ(cache.take(8 * kPage, kAlignment).base, eight.base);  // its own size first
  const Block next = cache.take(8 * kPage, kAlignment);           // 8 pages: none left, 9 fits
  EXPECT_EQ(next.base, nine.base);
  EXPECT_EQ(next.capacity, 9 * kPage);
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.cached_bytes(), 0);
  cache.give(eight);
  cache.give(next);
  EXPECT_EQ(cache.take(8 * kPage, kAlignment).base, eight.base);  // the emptied size again
  cache.give(eight);
  cache.give(ballast);
}

TEST(BlockCache, MoreSizesThanItKeepsEmptyLeaveConsistentCounts) {
  BlockCache cache;
  Block last;
  for (size_t pages = 1; pages <= 1100; ++pages) {  // one entry per size, most emptied, pruned
    last = cache.take(pages * kPage, kAlignment);
    cache.give(last);
  }
  EXPECT_EQ(cache.live_bytes(), 0);
  EXPECT_GT(cache.cached_bytes(), 0);
  EXPECT_LE(cache.cached_bytes(), int64_t(1100 * kPage + 550 * kPage));  // 1.5x the most in use
  const int64_t hits = cache.hits();
  const Block again = cache.take(1100 * kPage, kAlignment);
  EXPECT_EQ(again.base, last.base);
  EXPECT_EQ(cache.hits(), hits + 1);
  cache.give(again);
  cache.clear();
  EXPECT_EQ(cache.cached_bytes(), 0);
}

TEST(BlockCache, CachedAndLiveNeverExceedOneAndAHalfTimesTheMostInUse) {
  BlockCache cache;
  std::vector<Block> blocks;
  for (int i = 0; i < 4; ++i)
    blocks.push_back(cache.take(kMiB, kAlignment));  // the most in use: 4 MiB
  for (const Block& block : blocks)
    cache.give(block);
  EXPECT_EQ(cache.cached_bytes(), int64_t(4 * kMiB));
  // A size nothing cached serves: 4 MiB cached + 1 MiB new fits in 1.5 x 4 MiB.
  const Block other = cache.take(kMiB / 2, kAlignment);
  EXPECT_EQ(cache.cached_bytes(), int64_t(4 * kMiB));
  cache.give(other);
  // 4.5 MiB cached + 2 MiB new > 6 MiB: one cached block freed, then the limit holds.
  const Block larger = cache.take(2 * kMiB, kAlignment);
  EXPECT_EQ(cache.live_bytes(), int64_t(2 * kMiB));
  EXPECT_LE(cache.live_bytes() + cache.cached_bytes(), int64_t(6 * kMiB));
  EXPECT_EQ(cache.cached_bytes(), int64_t(3 * kMiB + kMiB / 2));
  cache.give(larger);
  cache.clear();
}

TEST(BlockCache, TurnedOffItFreesWhatItHoldsAndCachesNothing) {
  BlockCache cache;
  cache.give(cache.take(4 * kPage, kAlignment));
  EXPECT_EQ(cache.cached_bytes(), int64_t(4 * kPage));
  cache.set_enabled(false);
  EXPECT_FALSE(cache.enabled());
  EXPECT_EQ(cache.cached_bytes(), 0);
  cache.give(cache.take(4 * kPage, kAlignment));
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.hits(), 0);
  EXPECT_EQ(cache.live_bytes(), 0);
}

TEST(BlockCache, ThreadsTakingAndGivingLeaveConsistentCounts) {
  BlockCache cache;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 500; ++i) {
        const Block block = cache.take(size_t(1 + (i + t) % 5) * kPage, kAlignment);
        static_cast<char*>(block.base)[block.capacity - 1] = 1;
        cache.give(block);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(cache.live_bytes(), 0);
  EXPECT_GT(cache.hits(), 0);
  EXPECT_LE(cache.cached_bytes(), int64_t(4 * 5 * kPage + 2 * 5 * kPage));
}

TEST_F(TrackerTest, TensorsReuseFreedBlocksAndCountOnlyTheirBytes) {
  ASSERT_TRUE(tracker().reuse_freed_blocks());
  tracker().release_cached_blocks();  // blocks other tests left could fit the request better
  void* first = nullptr;
  {
    const torch::Tensor a = torch::empty({256, 1024}, torch::kFloat);  // 1 MiB
    first = a.data_ptr();
    EXPECT_EQ(tracker().current_bytes(), baseline_ + int64_t(kMiB));
  }
  EXPECT_GE(tracker().cached_bytes(), int64_t(kMiB));
  EXPECT_EQ(tracker().current_bytes(), baseline_);
  const torch::Tensor b = torch::empty({1000, 256}, torch::kFloat);  // an eighth smaller
  EXPECT_EQ(b.data_ptr(), first);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 1000 * 256 * 4);
}

TEST_F(TrackerTest, WithoutReuseFreedBlocksGoBackAtOnce) {
  tracker().set_reuse_freed_blocks(false);
  { const torch::Tensor a = torch::ones({256, 1024}, torch::kFloat); }
  EXPECT_EQ(tracker().cached_bytes(), 0);
  EXPECT_EQ(tracker().current_bytes(), baseline_);
  tracker().set_reuse_freed_blocks(true);
  { const torch::Tensor a = torch::ones({256, 1024}, torch::kFloat); }
  EXPECT_GE(tracker().cached_bytes(), int64_t(kMiB));
  tracker().release_cached_blocks();
  EXPECT_EQ(tracker().cached_bytes(), 0);
}

}  // namespace
}  // namespace bigbatch
