// Several micro-batches of a window at once, one per thread, with the window gradient bitwise
// that of running them one after another.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bigbatch/data/dataset.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/objective.h"

namespace bigbatch::engine {

/// Runs the forward and backward passes of a window's micro-batches `concurrency` at a time: the
/// calling thread takes the first of each group and accumulates it into .grad
/// (GradientAccumulator::backward); helper threads take the others, each returning its gradients
/// (GradientAccumulator::gradients_of), which the calling thread then adds to .grad in
/// micro-batch order (GradientAccumulator::accumulate). So the window gradient, loss and counts
/// are bitwise those of backward() over the same micro-batches one at a time, whatever the
/// threads' timing, as long as each micro-batch's own kernels compute the same (for example at
/// one OpenMP and one OpenBLAS thread per pass). Under data parallel the window's last backward
/// starts the gradient buckets only when the calling thread runs it; otherwise step() reduces
/// every gradient at the boundary.
///
/// Why: at a small micro-batch a pass is a long chain of small operations that one core runs
/// about as fast as two (OpenBLAS's second thread gains little on 128-row matrices, and ATen's
/// element-wise kernels stay on one thread below 32k elements), so a window runs up to
/// `concurrency` times faster with one pass per core. Memory: the activations of `concurrency`
/// passes, and the helpers' gradients (one set of the parameters' size per helper pass, until
/// added; in bf16 where fused blocks keep them, nn::KeptWeightGradScope), exist at once: more
/// than one pass at a time needs.
///
///   ConcurrentMicroBatches passes(2);
///   accumulator.begin_window(window_counts);
///   passes.run(accumulator, objective, batches, counts);   // instead of backward() per batch
///   WindowResult result = accumulator.step();
///
/// Contract: Objective::loss_sum must be safe to call on several threads at once, each with its
/// own batch: a training forward must not write module state but defer the write with
/// nn::defer_state_write, which run() makes after the pass, in micro-batch order (nn::BatchNorm
/// does so for its running statistics), and must not draw random numbers (dropout), whose
/// order between threads would depend on timing; run() throws InputError after a window in which
/// the default CPU generator advanced. The helper threads run ATen on as many OpenMP threads as
/// the constructing thread had (core::use_intra_op_threads_on_this_thread) under the calling
/// thread's thread-local state (grad mode, autocast): give that thread its share of the cores
/// (torch::set_num_threads(cores / concurrency)) before constructing, and OpenBLAS one thread
/// (OpenBLAS runs multithreaded calls from two threads one after the other). An exception in any
/// pass (out of memory included) is rethrown after the passes of its group have finished, with
/// the window's gradients partly accumulated: abort the window (GradientAccumulator::
/// abort_window) as after a failed backward().
class ConcurrentMicroBatches {
 public:
  /// Runs `concurrency` (>= 1; InputError otherwise) micro-batches at a time; starts
  /// concurrency - 1 helper threads, which wait for work.
  explicit ConcurrentMicroBatches(int64_t concurrency);
  /// Stops the helper threads.
  ~ConcurrentMicroBatches();
  ConcurrentMicroBatches(const ConcurrentMicroBatches&) = delete;
  ConcurrentMicroBatches& operator=(const ConcurrentMicroBatches&) = delete;

  /// Micro-batches run at a time.
  int64_t concurrency() const { return static_cast<int64_t>(helpers_.size()) + 1; }

  /// Forward (Objective::loss_sum) and backward of every batch, `counts[i]` being what
  /// `batches[i]` holds, inside the window `accumulator` has open; the gradients end in .grad as
  /// if accumulator.backward() had run on each batch in order.
  void run(GradientAccumulator& accumulator, Objective& objective,
           const std::vector<data::Batch>& batches, const std::vector<Counts>& counts);

 private:
  class Helper;
  std::vector<std::unique_ptr<Helper>> helpers_;
};

}  // namespace bigbatch::engine
