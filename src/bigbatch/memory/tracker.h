// Exact accounting of CPU tensor memory, with a budget, through a wrapping CPU allocator.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "bigbatch/memory/block_cache.h"

namespace bigbatch::memory {

/// The part of a training step that memory is attributed to (see MemoryTracker::set_phase).
enum class Phase { kSetup, kForward, kBackward, kOptimizer, kEval };

/// The count of Phase values.
inline constexpr size_t kPhaseCount = 5;

/// The lower-case name of a phase: "setup", "forward", "backward", "optimizer", "eval".
const char* phase_name(Phase phase);

class TrackingAllocator;
class PeakScope;

/// Counts every byte LibTorch allocates for CPU tensors once installed, exactly: the requested
/// storage sizes (not the allocator's 64-byte header or malloc's own overhead). Usage:
///   auto& tracker = MemoryTracker::instance();
///   tracker.install();                      // before creating the tensors to be counted
///   tracker.set_budget(parse_bytes("1.5GiB", "memory.budget"));
///   {
///     ScopedPhase phase(Phase::kForward);
///     loss = model->forward(x);             // may throw c10::OutOfMemoryError
///   }
///   std::cout << format_bytes(tracker.peak_bytes(Phase::kForward));
/// The tracker is one process-wide object; its counters are atomics, safe from any thread.
/// Not counted: memory from before install() (and its release), OpenBLAS/oneDNN internal
/// buffers, `torch::from_blob` memory, and non-CPU devices.
class MemoryTracker {
 public:
  /// The process-wide tracker (never destroyed, so tensors freed at exit still find it).
  static MemoryTracker& instance();

  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  /// Installs the counting allocator as LibTorch's CPU allocator, with a priority above the
  /// default one. Idempotent. Only allocations made after this call are counted: call it at the
  /// start of main, before the model and data tensors are created. Tensors created earlier keep
  /// their own deleter and never touch the counters.
  void install();
  /// Whether install() has been called.
  bool installed() const { return installed_.load(); }

  /// Bytes of CPU tensor storage allocated through the tracker and not yet freed.
  int64_t current_bytes() const { return current_.load(); }
  /// The highest current_bytes() since the last reset_peak() (or since start).
  int64_t peak_bytes() const { return peak_.load(); }
  /// Sets the peak to the current usage.
  void reset_peak();

  /// Whether freed blocks of 1 KiB or more are kept for the next allocations of about their
  /// size (BlockCache; default true): LibTorch's CPU tensors then reuse memory instead of going
  /// through malloc each time. Off frees the cached blocks. Counting and the budget are the same
  /// either way: they count tensor bytes, never cached ones.
  void set_reuse_freed_blocks(bool reuse);
  /// Whether freed blocks are kept.
  bool reuse_freed_blocks() const;
  /// Bytes of freed blocks kept for reuse (not counted in current_bytes()).
  int64_t cached_bytes() const;
  /// Frees the blocks kept for reuse.
  void release_cached_blocks();

  /// Limits current_bytes(): an allocation that would take it above `bytes` throws
  /// c10::OutOfMemoryError (and allocates nothing). 0 means unlimited; negative is an
  /// InputError. A budget below the current usage only stops further allocations.
  void set_budget(int64_t bytes);
  /// The budget in bytes, 0 when unlimited.
  int64_t budget() const { return budget_.load(); }

  /// The count of successful allocations of at least one byte since start.
  int64_t allocations() const { return allocations_.load(); }
  /// The count of allocations refused (budget) or failed (the system) since start.
  int64_t oom_count() const { return oom_count_.load(); }

  /// Attributes the following allocations to `phase` (process-wide, for all threads); the
  /// phase's peak is raised to the current usage at once.
  void set_phase(Phase phase);
  /// The phase set last (kSetup at start).
  Phase phase() const { return static_cast<Phase>(phase_.load()); }
  /// The highest current_bytes() observed while `phase` was set, since reset_phase_peaks().
  int64_t peak_bytes(Phase phase) const;
  /// Forgets the phase peaks: every phase's peak becomes 0, the current phase's the current usage.
  void reset_phase_peaks();

 private:
  friend class TrackingAllocator;
  friend class PeakScope;

  MemoryTracker() = default;

  /// Counts `bytes` as allocated if the budget allows it; throws c10::OutOfMemoryError if not.
  void reserve(int64_t bytes);
  /// Undoes reserve(): the memory was freed (or the system refused to allocate it).
  void release(int64_t bytes) { current_.fetch_sub(bytes); }
  /// Counts a refused or failed allocation.
  void count_oom() { oom_count_.fetch_add(1); }
  /// Raises the peaks (overall and the current phase's) to at least `bytes`.
  void observe(int64_t bytes);
  /// Raises the overall peak to at least `bytes`.
  void raise_peak(int64_t bytes);

  std::atomic<bool> installed_{false};
  std::mutex install_mutex_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> budget_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> oom_count_{0};
  std::atomic<int> phase_{static_cast<int>(Phase::kSetup)};
  std::array<std::atomic<int64_t>, kPhaseCount> phase_peaks_{};
  BlockCache blocks_;
};

/// Measures the peak over a region: the highest current_bytes() above its value at the start.
/// The tracker's overall peak is reset at the start and, at the end, raised back to what it was
/// before if that was higher, so an outer peak (or an enclosing PeakScope) stays correct. Usage:
///   PeakScope scope;
///   run_step();
///   int64_t step_peak = scope.peak_above_start();
class PeakScope {
 public:
  /// Remembers the current usage and the overall peak, then resets the peak to the current usage.
  PeakScope();
  /// Raises the overall peak back to at least the value it had before the scope.
  ~PeakScope();
  PeakScope(const PeakScope&) = delete;
  PeakScope& operator=(const PeakScope&) = delete;

  /// current_bytes() when the scope began.
  int64_t start_bytes() const { return start_; }
  /// The peak so far within the scope, above start_bytes() (never negative).
  int64_t peak_above_start() const;

 private:
  int64_t start_;
  int64_t outer_peak_;
};

/// Runs `fn` and returns its peak: the highest current_bytes() during `fn` above the value at
/// its start (see PeakScope). Exceptions from `fn` propagate.
int64_t measure_peak(const std::function<void()>& fn);

/// Sets a phase for the lifetime of the object and restores the previous one after. Usage:
///   { ScopedPhase phase(Phase::kBackward); loss.backward(); }
class ScopedPhase {
 public:
  /// Sets `phase` on the tracker, remembering the phase it replaces.
  explicit ScopedPhase(Phase phase);
  /// Restores the phase that was set before.
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Phase previous_;
};

}  // namespace bigbatch::memory
