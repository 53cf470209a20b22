// Gathering batches on a background thread, so that loading overlaps compute.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

/// Gathers batches of a Dataset on one background thread, in the order they were requested.
/// next() returns exactly what dataset.get(indices) would return for the same requests in the
/// same order (Dataset::get is deterministic), only earlier. Usage, one window at a time:
///   Prefetcher prefetcher(train, /*depth=*/2);
///   for (const std::vector<int64_t>& micro : micro_batches) prefetcher.request(micro);
///   for (size_t i = 0; i < micro_batches.size(); ++i) {
///     Batch batch = prefetcher.next();  // blocks until gathered; rethrows get()'s exception
///     ...forward, backward...
///   }
///   prefetcher.clear();  // on a restart: drop what is pending, then request the new split
///
/// Memory: at most `depth` batches exist inside the prefetcher at a time (gathered and waiting,
/// or being gathered); the requested index lists are kept until their batch is returned. Depth 0
/// gathers synchronously inside next() on the caller's thread and starts no thread.
///
/// Threads: the worker runs Dataset::get under torch::NoGradGuard (grad mode is per thread) and
/// outside autocast (also per thread); it does not use c10::InferenceMode, whose tensors could
/// not be saved for backward by the model. Parallel ATen ops in get() (index_select, casts) size
/// their OpenMP team from at::get_num_threads() on the worker's first parallel op, as on any
/// thread, so they may run alongside the caller's compute; keep get() to gathering and
/// conversion. Allocations on the worker count in memory::MemoryTracker like any other (the
/// tracker is process-wide), and a budget refusal there comes back from next() as the
/// c10::OutOfMemoryError of that batch. The Dataset must outlive the Prefetcher and must be safe
/// to read from two threads (every bigbatch Dataset is immutable). The Prefetcher itself is
/// meant for one consumer thread.
class Prefetcher {
 public:
  /// Prefetches from `dataset`, holding at most `depth` batches (>= 0; InputError otherwise).
  /// Starts the worker thread when depth > 0.
  explicit Prefetcher(const Dataset& dataset, int64_t depth = 2);
  /// Stops the worker: a get() in progress finishes, pending requests are dropped.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// Queues a batch of `indices` to gather after the ones already requested.
  void request(std::vector<int64_t> indices);
  /// The batch of the oldest request not yet returned, blocking until it is gathered. Rethrows
  /// the exception Dataset::get threw for that batch (later batches are unaffected). Throws
  /// std::logic_error when nothing is pending.
  Batch next();
  /// Drops every pending request and gathered batch. Returns when the worker is idle, so that
  /// afterwards the prefetcher holds no batch memory.
  void clear();
  /// Requests not yet returned by next().
  int64_t pending() const;
  /// The most batches held at a time.
  int64_t depth() const { return depth_; }
  /// From now on, copies every gathered batch into pinned (page-locked) host memory, on the
  /// worker, so that its copy to a GPU can run asynchronously beside the compute. Call before
  /// the first request; needs a CUDA build.
  void pin_batches();

 private:
  /// One request and, once gathered, its result.
  struct Slot {
    std::vector<int64_t> indices;
    bool done = false;
    Batch batch;
    std::exception_ptr error;
  };

  void run();
  /// dataset_.get(indices), pinned when pin_ is set.
  Batch gather(const std::vector<int64_t>& indices) const;

  const Dataset& dataset_;
  const int64_t depth_;
  mutable std::mutex mutex_;
  std::condition_variable work_;     // the worker waits: a request, a free place, or stop
  std::condition_variable changed_;  // consumers wait: a batch gathered, the worker idle
  std::deque<Slot> slots_;           // pending requests, oldest first
  size_t gathered_ = 0;              // slots_[0, gathered_) are done; the worker takes the next
  uint64_t generation_ = 0;          // bumped by clear(): a gather in flight is discarded
  bool busy_ = false;                // the worker is inside Dataset::get
  bool stop_ = false;
  bool pin_ = false;  // set before the first request, read by the worker
  std::thread worker_;
};

}  // namespace bigbatch::data
