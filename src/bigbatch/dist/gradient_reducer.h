// Summing the window gradient over the ranks once per optimizer step, in buckets that start as
// soon as the last micro-batch's backward has produced them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bigbatch/core/torch_compat.h"
#include "bigbatch/dist/communicator.h"

namespace bigbatch::dist {

/// Bucket settings.
struct ReducerOptions {
  /// A bucket holds consecutive parameters (in reverse registration order, roughly the order in
  /// which backward finishes them) up to this many bytes of gradient; a parameter larger than
  /// that gets a bucket of its own. Smaller buckets start sooner and overlap more of backward;
  /// each costs one collective.
  TORCH_ARG(int64_t, bucket_bytes) = int64_t{1} << 20;
};

/// Communication of one window.
struct ReductionStats {
  int64_t calls = 0;             ///< all-reduce calls (one per bucket)
  int64_t bytes = 0;             ///< bytes handed to them (gradients plus one flag per parameter)
  int64_t early_buckets = 0;     ///< buckets started during backward (the rest at finish())
  double busy_seconds = 0.0;     ///< time at least one bucket was in flight
  double hidden_seconds = 0.0;   ///< of that, the part before finish() was called (behind backward)
  double exposed_seconds = 0.0;  ///< time finish() waited for the buckets
};

/// Sums the gradients of `parameters` over the ranks at each window boundary, and only there:
/// micro-batches before the last of a window accumulate locally without any communication (what
/// PyTorch's DDP.no_sync does). Hooks on the parameters' gradient accumulators copy each final
/// gradient of the last backward into its bucket; a bucket is all-reduced as soon as it is full,
/// buckets in order, so communication overlaps the rest of that backward. Usage, on every rank:
///
///   GradientReducer reducer(communicator, model->parameters());
///   for each window:
///     for each micro-batch but the last: loss.backward();   // local accumulation only
///     reducer.arm();                                        // the next backward is the last
///     last_loss.backward();                                 // buckets start as they fill
///     reducer.finish();   // .grad = the sum over all ranks, bitwise equal on every rank
///
/// The loss must be normalised by the whole job's window count (GradientAccumulator does this
/// when given the communicator), so that the sum is the gradient of the global mean loss. A rank
/// with no micro-batch in a window calls finish() alone; a parameter without gradient on some
/// ranks counts as zero there, and one without gradient on every rank keeps none.
class GradientReducer {
 public:
  GradientReducer(Communicator& communicator, std::vector<torch::Tensor> parameters,
                  ReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// The next backward is this rank's last of the window.
  void arm();
  /// Starts what the last backward did not, waits for all buckets and writes the sums into .grad.
  /// Throws DistError when a peer fails.
  void finish();
  /// Takes part in the window's collectives without using their result (this rank abandons the
  /// window); the gradients are left for the caller to free.
  void abandon();

  /// Number of buckets (the all-reduce calls of a window).
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  /// Bytes all-reduced per window, over all buckets.
  int64_t bytes_per_window() const;
  /// The last finished (or abandoned) window's communication.
  const ReductionStats& last_window() const { return last_window_; }

 private:
  struct Bucket {
    std::vector<int64_t> parameters;  ///< indices into parameters_
    std::vector<int64_t> offsets;     ///< of each parameter's gradient in `flat`
    torch::Tensor flat;   ///< (sum of numels + parameters) gradients, then one flag per parameter
    int64_t waiting = 0;  ///< parameters of the armed backward not yet copied in
    std::unique_ptr<PendingWork> work;
    double started_at = 0.0;
  };
  class ReadyHook;

  /// A parameter's final gradient of the armed backward is there.
  void on_gradient_ready(int64_t parameter);
  /// Copies parameter's gradient (or zeros) into its bucket with its flag.
  void fill(int64_t parameter);
  /// Starts the buckets that are full, in order.
  void launch_ready();
  void launch(Bucket& bucket, int64_t index);
  /// Fills and launches every bucket not yet started, waits for all, records last_window_.
  void complete_all();
  void reset();

  Communicator& communicator_;
  std::vector<torch::Tensor> parameters_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_;                        ///< parameter -> bucket
  std::vector<int64_t> slot_of_;                          ///< parameter -> index within its bucket
  std::vector<bool> filled_;                              ///< parameter copied in this window
  std::vector<compat::GradAccumulatorPtr> accumulators_;  ///< kept alive for the hooks
  std::vector<uintptr_t> hook_keys_;
  bool armed_ = false;
  int64_t next_launch_ = 0;
  double finish_called_at_ = 0.0;
  ReductionStats last_window_;
};

}  // namespace bigbatch::dist
