#include "bigbatch/memory/tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"

namespace bigbatch::memory {

namespace {

/// Payload alignment, and the size of the header before the payload that stores its size.
/// LibTorch's own CPU allocator aligns to c10::gAlignment (64 on servers); SIMD kernels rely on it.
constexpr size_t kAlignment = 64;
static_assert(kAlignment >= c10::gAlignment, "the payload must be as aligned as LibTorch's");
static_assert(kAlignment >= sizeof(int64_t), "the header must hold the size");

/// Blocks of at least this many payload bytes go through the block cache; smaller ones straight
/// to malloc, whose small-chunk bins are fast (1 KiB measured faster than 16 KiB: BENCHMARKS.md).
constexpr size_t kCachedFrom = 1024;

/// What the header before each payload holds.
struct Header {
  int64_t bytes;    ///< the payload size counted by the tracker
  size_t capacity;  ///< the block's capacity in the block cache; 0 for a block from malloc
};
static_assert(sizeof(Header) <= kAlignment, "the header must fit before the payload");

/// SetAllocator keeps the allocator of the highest priority; LibTorch's default has 0.
constexpr uint8_t kPriority = 200;

/// Raises `target` to at least `value`.
void raise_to(std::atomic<int64_t>& target, int64_t value) {
  int64_t seen = target.load();
  while (seen < value && !target.compare_exchange_weak(seen, value)) {
  }
}

}  // namespace

/// The counting CPU allocator. Each block is [header of kAlignment bytes][payload]; the header
/// stores the payload size and where the block came from, so data == context and the deleter
/// needs no other state: that is what raw_allocate()/raw_deallocate() (used by some kernels)
/// require. Blocks of kCachedFrom bytes or more come from the tracker's BlockCache.
///
/// No member says `override`: LibTorch 2.3 made allocate() non-const and added the pure virtual
/// copy_data(), so both forms of allocate() are declared and each version overrides the one it
/// has (clang warns about an `override` on some members but not on all).
class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0)
      return {nullptr, nullptr, &free_block, cpu};
    MemoryTracker& tracker = MemoryTracker::instance();
    constexpr size_t kLargest =
        static_cast<size_t>(std::numeric_limits<int64_t>::max()) - kAlignment;
    if (n > kLargest) {
      tracker.count_oom();
      C10_THROW_ERROR(OutOfMemoryError, cat("CPU out of memory: tried to allocate ", n, " bytes"));
    }
    const auto bytes = static_cast<int64_t>(n);
    tracker.reserve(bytes);  // throws when over the budget
    Header header{bytes, 0};
    void* block = nullptr;
    if (n >= kCachedFrom) {
      const Block cached =
          tracker.blocks_.take(BlockCache::capacity_for(kAlignment + n), kAlignment);
      block = cached.base;
      header.capacity = cached.capacity;
    } else if (posix_memalign(&block, kAlignment, kAlignment + n) != 0) {
      block = nullptr;
    }
    if (block == nullptr) {
      tracker.release(bytes);
      tracker.count_oom();
      C10_THROW_ERROR(
          OutOfMemoryError,
          cat("CPU out of memory: the system refused to allocate ", format_bytes(bytes), " (", n,
              " bytes) with ", format_bytes(tracker.current_bytes()), " of tensors in use"));
    }
    std::memcpy(block, &header, sizeof header);
    void* payload = static_cast<char*>(block) + kAlignment;
    tracker.allocations_.fetch_add(1);
    return {payload, payload, &free_block, cpu};
  }

  c10::DataPtr allocate(size_t n) {
    return static_cast<const TrackingAllocator*>(this)->allocate(n);
  }

  c10::DeleterFnPtr raw_deleter() const { return &free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0)
      std::memcpy(dest, src, count);
  }

  /// The deleter of every block: uncounts the payload size stored in the header and frees the
  /// block or gives it back to the block cache.
  static void free_block(void* payload) {
    if (payload == nullptr)
      return;
    void* block = static_cast<char*>(payload) - kAlignment;
    Header header{};
    std::memcpy(&header, block, sizeof header);
    MemoryTracker& tracker = MemoryTracker::instance();
    if (header.capacity > 0)
      tracker.blocks_.give({block, header.capacity});
    else
      std::free(block);
    tracker.release(header.bytes);
  }
};

namespace {

/// Never destroyed: LibTorch keeps the pointer, and tensors may be freed during exit.
TrackingAllocator& tracking_allocator() {
  static auto* allocator = new TrackingAllocator();
  return *allocator;
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kSetup:
      return "setup";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kEval:
      return "eval";
  }
  return "unknown";
}

MemoryTracker& MemoryTracker::instance() {
  static auto* tracker = new MemoryTracker();
  return *tracker;
}

void MemoryTracker::install() {
  std::lock_guard<std::mutex> lock(install_mutex_);
  if (installed_.load())
    return;
  TrackingAllocator& allocator = tracking_allocator();
  c10::SetCPUAllocator(&allocator, kPriority);
  BB_CHECK(c10::GetCPUAllocator() == &allocator, "another CPU allocator with a priority above ",
           int{kPriority}, " is installed");
  installed_.store(true);
}

void MemoryTracker::set_reuse_freed_blocks(bool reuse) {
  blocks_.set_enabled(reuse);
}

bool MemoryTracker::reuse_freed_blocks() const {
  return blocks_.enabled();
}

int64_t MemoryTracker::cached_bytes() const {
  return blocks_.cached_bytes();
}

void MemoryTracker::release_cached_blocks() {
  blocks_.clear();
}

void MemoryTracker::reset_peak() {
  peak_.store(current_.load());
}

void MemoryTracker::set_budget(int64_t bytes) {
  BB_CHECK_INPUT(bytes >= 0, "memory budget = ", bytes, " bytes must be >= 0 (0 = unlimited)");
  budget_.store(bytes);
}

void MemoryTracker::set_phase(Phase phase) {
  phase_.store(static_cast<int>(phase));
  raise_to(phase_peaks_[static_cast<size_t>(phase)], current_.load());
}

int64_t MemoryTracker::peak_bytes(Phase phase) const {
  return phase_peaks_[static_cast<size_t>(phase)].load();
}

void MemoryTracker::reset_phase_peaks() {
  for (auto& peak : phase_peaks_)
    peak.store(0);
  raise_to(phase_peaks_[static_cast<size_t>(phase_.load())], current_.load());
}

void MemoryTracker::reserve(int64_t bytes) {
  const int64_t limit = budget_.load();
  int64_t now = current_.load();
  int64_t next = 0;
  do {
    next = now + bytes;
    if (limit > 0 && next > limit) {
      count_oom();
      C10_THROW_ERROR(
          OutOfMemoryError,
          cat("CPU out of memory under the memory budget: tried to allocate ", format_bytes(bytes),
              " with ", format_bytes(now), " of ", format_bytes(limit), " in use (", bytes, " + ",
              now, " > ", limit, " bytes)"));
    }
  } while (!current_.compare_exchange_weak(now, next));
  observe(next);
}

void MemoryTracker::observe(int64_t bytes) {
  raise_to(peak_, bytes);
  raise_to(phase_peaks_[static_cast<size_t>(phase_.load())], bytes);
}

void MemoryTracker::raise_peak(int64_t bytes) {
  raise_to(peak_, bytes);
}

PeakScope::PeakScope() {
  MemoryTracker& tracker = MemoryTracker::instance();
  outer_peak_ = tracker.peak_bytes();
  start_ = tracker.current_bytes();
  tracker.reset_peak();
}

PeakScope::~PeakScope() {
  MemoryTracker::instance().raise_peak(outer_peak_);
}

int64_t PeakScope::peak_above_start() const {
  return std::max<int64_t>(MemoryTracker::instance().peak_bytes() - start_, 0);
}

int64_t measure_peak(const std::function<void()>& fn) {
  PeakScope scope;
  fn();
  return scope.peak_above_start();
}

ScopedPhase::ScopedPhase(Phase phase) : previous_(MemoryTracker::instance().phase()) {
  MemoryTracker::instance().set_phase(phase);
}

ScopedPhase::~ScopedPhase() {
  MemoryTracker::instance().set_phase(previous_);
}

}  // namespace bigbatch::memory
