// The windows of a run and their micro-batches, gathered ahead on a data::Prefetcher.
#pragma once

#include <cstdint>
#include <deque>

#include "bigbatch/data/dataset.h"
#include "bigbatch/data/prefetcher.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/window_sampler.h"

namespace bigbatch::engine {

/// The windows of a run, drawn from a WindowSampler in its order, and their micro-batches (of
/// this rank's shard), requested from a data::Prefetcher at the plan's split in the same order.
/// Windows after the current one are drawn early (the sampler is deterministic, so its order is the
/// same as drawing each when due) and requested while fewer than the prefetcher's depth of batches
/// are pending, so that gathering them overlaps the current window's compute.
class WindowFeed {
 public:
  /// Draws from `data` in windows of plan.global_batch (`seed`'s order, from `start`), gathering
  /// at most `depth` batches ahead, of the shard of `rank` among plan.world_size.
  WindowFeed(const data::Dataset& data, const Plan& plan, uint64_t seed, int64_t depth,
             DataPosition start, int64_t rank);

  /// The next window of the sampler; its micro-batches are requested (at `plan`'s split).
  Window take(const Plan& plan);
  /// The oldest requested micro-batch; rethrows the error gathering it raised.
  data::Batch next() { return prefetcher_.next(); }
  /// Draws and requests windows while at most `windows` are ahead and fewer batches than the
  /// depth are pending. Call once the current window's batches are all taken.
  void look_ahead(const Plan& plan, int64_t windows);
  /// Drops every pending batch, then requests `current` and the windows ahead at `plan`'s split.
  void restart(const Window& current, const Plan& plan);
  /// Gathers the batches into pinned host memory (data::Prefetcher::pin_batches), for a model on
  /// a GPU. Call before the first take().
  void pin_batches() { prefetcher_.pin_batches(); }

 private:
  void draw(const Plan& plan);
  void request(const Window& window, const Plan& plan);

  WindowSampler sampler_;
  data::Prefetcher prefetcher_;
  std::deque<Window> ahead_;  ///< drawn and requested, not yet taken
  int64_t rank_;
};

}  // namespace bigbatch::engine
