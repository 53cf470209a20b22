// Freed CPU tensor blocks kept for the next allocation of about their size. A training loop
// allocates the same sizes every micro-batch; through malloc each large block costs glibc's
// large-chunk work (searching, splitting, consolidating) and, after it trims its heap, the
// kernel's page faults, all on the thread that runs LibTorch's operators while the other OpenMP
// threads wait (docs/BENCHMARKS.md, "Freed tensor blocks reused").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace bigbatch::memory {

/// A block from posix_memalign: where it starts and how many bytes it holds.
struct Block {
  void* base = nullptr;
  size_t capacity = 0;
};

/// Freed blocks by capacity, handed out again for requests of about their size. A cached block
/// serves a request of `capacity` bytes when it holds at most capacity + capacity / 8; of equal
/// blocks, the one freed last (warm in the caches). Before a new block is allocated, cached
/// blocks are freed (largest first) until the blocks in use and cached together fit within 1.5x
/// the most ever in use: the backward pass frees blocks of other sizes than the forward pass
/// allocates, and with 1x they would evict each other every micro-batch. Thread-safe; one mutex.
class BlockCache {
 public:
  /// Blocks are whole pages: `bytes` rounded up to a multiple of kPage.
  static constexpr size_t kPage = 4096;
  /// Capacities past kClassSteps pages step by 1/kClassSteps of a power of two.
  static constexpr size_t kClassSteps = 8;

  /// The capacity take() is asked for to hold `bytes`: `bytes` rounded up to whole pages, and past
  /// 8 pages to a multiple of an eighth of the largest power of two at or below it (at most an
  /// eighth more). Sizes that differ a little, as the rows of packed tokens do from one
  /// micro-batch to the next, then share a capacity and reuse each other's blocks.
  static size_t capacity_for(size_t bytes);

  /// A block of at least `capacity` bytes (a multiple of kPage), aligned to `alignment`: a
  /// cached one where one fits, a new one otherwise. Where the system refuses, frees every cached
  /// block and tries once more; {nullptr, 0} where it refuses again.
  Block take(size_t capacity, size_t alignment);
  /// Takes back a block take() returned: cached while enabled, freed otherwise.
  void give(Block block);

  /// Turns caching on (the default) or off; off frees every cached block.
  void set_enabled(bool enabled);
  /// Whether freed blocks are kept.
  bool enabled() const;
  /// Frees every cached block.
  void clear();

  /// Bytes of the blocks cached (freed and kept).
  int64_t cached_bytes() const;
  /// Bytes of the blocks handed out and not yet given back.
  int64_t live_bytes() const;
  /// How many take() calls a cached block served.
  int64_t hits() const;

 private:
  /// Frees cached blocks, largest first, until `room` more bytes fit within 1.5x the high water.
  void free_until_room_for(size_t room);
  /// Frees every cached block.
  void free_all();
  /// The last block of a non-empty stack of cached_blocks_, taken off it (and counted in
  /// empty_stacks_ where that empties it); cached_ is the caller's to lower.
  void* pop(std::vector<void*>& stack);

  /// Empty stacks kept at most: past this many, give() erases them all (the sizes of a training
  /// loop recur and keep their entries; shapes that vary would otherwise pile them up).
  static constexpr size_t kMostEmptyStacks = 1024;

  mutable std::mutex mutex_;
  /// capacity -> the cached blocks' bases, the last freed last. A capacity stays while its stack
  /// is empty: a block given back then needs no new node (a multimap of blocks allocated and freed
  /// one for every block given back and taken).
  std::map<size_t, std::vector<void*>> cached_blocks_;
  size_t empty_stacks_ = 0;  ///< capacities in cached_blocks_ whose stacks are empty
  size_t cached_ = 0;        ///< sum of the cached blocks' capacities
  size_t live_ = 0;          ///< capacity of the blocks handed out
  size_t high_water_ = 0;    ///< the most live_ has been (counting a block about to be allocated)
  bool enabled_ = true;
  int64_t hits_ = 0;
};

}  // namespace bigbatch::memory
