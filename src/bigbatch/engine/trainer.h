// The training loop: windows of micro-batches, exact accumulation, evaluation, reporting.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"
#include "bigbatch/dist/communicator.h"
#include "bigbatch/dist/gradient_reducer.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/batch_transfer.h"
#include "bigbatch/engine/concurrent_micro_batches.h"
#include "bigbatch/engine/lr_schedule.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/window_feed.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/metrics/sink.h"

namespace bigbatch::engine {

/// Loop settings. The defaults are those of `bigbatch train`, whose config reads them from here.
struct TrainerOptions {
  /// Optimizer steps (windows) to train.
  TORCH_ARG(int64_t, total_steps) = 300;
  /// Evaluate every this many optimizer steps (and before the first and after the last); 0: only
  /// after the last.
  TORCH_ARG(int64_t, eval_every) = 50;
  /// Validation samples per evaluation (the first ones, in order); 0: all of them.
  TORCH_ARG(int64_t, eval_samples) = 512;
  /// Seed of the data order.
  TORCH_ARG(uint64_t, seed) = 1;
  /// Clip the window gradient to this norm; 0: no clipping.
  TORCH_ARG(double, max_grad_norm) = 1.0;
  /// On c10::OutOfMemoryError inside a window, restart the window with half the micro-batch
  /// (down to 1) instead of failing.
  TORCH_ARG(bool, retry_on_oom) = true;
  /// A window with a non-finite loss (or, without a loss scaler, gradient): skip it or stop.
  TORCH_ARG(NonFinitePolicy, on_nonfinite) = NonFinitePolicy::kSkip;
  /// More than this many skipped windows in a row stop the run with a NonFiniteError. 25 lets a
  /// loss scaler back off by 2^25 (from 2^24 down to below 1) before the run gives up.
  TORCH_ARG(int64_t, max_consecutive_skips) = 25;
  /// Training micro-batches gathered ahead on a background thread (data::Prefetcher), so that
  /// loading overlaps compute; 0 gathers them synchronously at the start of each window. A
  /// window's batches must all be gathered and counted before its first backward (each is
  /// normalised by the whole window's count), so the windows after the current one are drawn
  /// from the sampler early and requested while fewer than this many batches are pending; with
  /// at least accum_steps, the next window is ready when the current one ends. Training results
  /// do not depend on it: the data order, losses and weights are bitwise those of depth 0.
  /// Memory: at most this many batches beyond the current window's exist at a time; they count
  /// against memory.budget (the tracker is process-wide, and a window's peak_bytes includes
  /// them). An out-of-memory error while gathering, on the worker or not, restarts the window at
  /// half the micro-batch like one in forward, and a restart drops and re-gathers everything
  /// pending at the new split. Default 8: one window of the default plan (64 as 8 x 8).
  TORCH_ARG(int64_t, prefetch_depth) = 8;
  /// Save a checkpoint (TrainingSetup::checkpoints) every this many optimizer steps, and after the
  /// last; 0: only after the last.
  TORCH_ARG(int64_t, checkpoint_every) = 100;
  /// Data parallel: bytes of gradient per all-reduce bucket (dist::ReducerOptions).
  TORCH_ARG(int64_t, bucket_bytes) = int64_t{1} << 20;
  /// Micro-batches of a window run at once, one per thread (engine::ConcurrentMicroBatches); 1
  /// runs them one after another. The window gradient is bitwise the same either way when each
  /// pass's kernels compute the same. The model must not write state in a training forward
  /// (BatchNorm) or draw random numbers (dropout); the activations of this many micro-batches
  /// exist at once. Under data parallel the gradients are then reduced at the boundary, not
  /// during the last backward.
  TORCH_ARG(int64_t, concurrent_micro_batches) = 1;
  /// OpenMP threads of the training thread while it evaluates; 0: those it trains on. A run of
  /// several passes at once gives each pass a share of the cores; evaluation, one pass at a
  /// time, can have them all.
  TORCH_ARG(int64_t, evaluation_threads) = 0;
};

/// State that lives beside the window gradient and must follow the window's life, such as
/// BatchNorm running statistics gathered over a whole window (nn::RunningStatsMode::kPerWindow).
class WindowHooks {
 public:
  virtual ~WindowHooks() = default;
  /// Before the first micro-batch of a window, and again when an out-of-memory restart starts
  /// the window over from its first micro-batch.
  virtual void on_window_begin() {}
  /// After the boundary: `stepped` is true when the optimizer stepped, false when the window was
  /// skipped as non-finite (its data is dropped).
  virtual void on_window_end(bool stepped) { (void)stepped; }
};

/// Throws InputError naming the first option out of range (the Trainer's constructor calls it).
void validate(const TrainerOptions& options);

struct LoopState;

/// Receives the loop's state at window boundaries to save it with the model, optimizer, loss
/// scaler and random generators (engine::Checkpointer). Called after the boundary's metrics and
/// evaluation, so the state is complete: nothing of the next window has run.
class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  virtual void save(const LoopState& state) = 0;
};

/// Everything the loop works on; the trainer holds references, the caller owns them.
struct TrainingSetup {
  /// The model, on the device training runs on (the CPU or one GPU): batches are gathered on the
  /// CPU, counted there, and moved to it; the window's peak memory is that device's.
  torch::nn::Module* model = nullptr;
  Objective* objective = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  const LrSchedule* schedule = nullptr;
  const Plan* plan = nullptr;
  const data::Dataset* train_data = nullptr;
  const data::Dataset* val_data = nullptr;  ///< may be null: no evaluation
  LossScaler* loss_scaler = nullptr;        ///< may be null: no loss scaling
  std::vector<WindowHooks*> window_hooks;   ///< told about every window, in order (not owned)
  CheckpointSink* checkpoints = nullptr;    ///< may be null: no checkpoints
  /// May be null. Once it reads true, the loop stops at the next window boundary, after saving a
  /// checkpoint (when there is a sink); TrainSummary::stopped tells. Set it from a signal handler
  /// to stop cleanly on SIGINT or SIGTERM. Under data parallel, give it on every rank or on none:
  /// the ranks agree at each boundary, so all stop at the same one when any rank asks.
  const std::atomic<bool>* stop_requested = nullptr;
  /// May be null: a single process. Otherwise this is one rank of a data-parallel job and every
  /// rank runs the same loop with the same setup (same seed, data, plan with its world_size):
  /// rank 0's weights are broadcast at the start; each rank takes its shard of every window
  /// (engine::shard_range) and accumulates it locally; gradients are summed once per window
  /// (dist::GradientReducer) and the counts, the loss and every decision (a rank out of memory,
  /// a stop request, a failed checkpoint write) are agreed, so every rank takes the same steps
  /// and holds the same weights. Evaluation is sharded too. Give checkpoint and metrics sinks to
  /// rank 0 only; the random generator states of every rank reach its checkpoints.
  dist::Communicator* communicator = nullptr;
};

/// How training went.
struct TrainSummary {
  int64_t steps = 0;              ///< optimizer steps taken (skipped windows not included)
  int64_t skipped_steps = 0;      ///< windows skipped as non-finite (their data is dropped)
  double final_loss_scale = 0.0;  ///< the loss scale at the end; 0 without a loss scaler
  int64_t epochs_started = 0;     ///< epochs the data order reached
  double last_train_loss = 0.0;   ///< mean loss of the last window that took a step
  double first_val_loss = 0.0;    ///< before training (NaN without validation data)
  double last_val_loss = 0.0;     ///< after training (NaN without validation data)
  /// Accuracy of the last evaluation; empty without validation data or a notion of accuracy.
  std::optional<double> last_val_accuracy;
  int64_t samples = 0;            ///< training samples seen (skipped windows included)
  int64_t tokens = 0;             ///< counted training tokens seen (skipped windows included)
  double seconds = 0.0;           ///< wall time of the loop, evaluation included
  double train_seconds = 0.0;     ///< wall time of the windows alone
  int64_t peak_bytes = 0;         ///< peak tensor memory of any window (0: not tracked)
  int64_t final_micro_batch = 0;  ///< micro-batch at the end (smaller after out-of-memory)
  bool stopped = false;           ///< stopped early on TrainingSetup::stop_requested
};

/// Where a run is at a window boundary: with the model, optimizer, loss scaler and random
/// generators, everything needed to continue exactly as if the run had not stopped. Counters and
/// times in `summary` continue across a resume.
struct LoopState {
  TrainSummary summary;           ///< the run so far (summary.steps: optimizer steps taken)
  DataPosition data;              ///< where the next window starts in the data order
  int64_t windows = 0;            ///< windows taken, skipped ones included
  int64_t consecutive_skips = 0;  ///< windows skipped in a row just before this boundary
  int64_t micro_batch = 0;        ///< micro-batch in use (smaller than the plan's after OOM)
  /// Data parallel: the random generator states (RngState::states()) of every rank, in rank
  /// order; empty in a single process, whose checkpoint captures the current ones.
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> rank_rng_states;
};

/// Runs the loop in numbered phases per window:
///   1 take a window of sample indices, split it into micro-batches (plan.split_window) and
///     gather them; with prefetch_depth > 0 they were gathered on a background thread while the
///     windows before computed
///   2 count the window, then forward + backward each micro-batch (GradientAccumulator; with
///     concurrent_micro_batches > 1, that many at once through ConcurrentMicroBatches); out of
///     memory restarts the window at half the micro-batch
///   3 boundary: unscale + check for inf/NaN, clip, lr schedule, optimizer step, zero gradients;
///     or skip a non-finite window (its data is dropped, not retried; it is not a step)
///   4 observe: metrics sinks (skipped windows too, with a notice); evaluate when due
///   5 persist: hand the LoopState to the checkpoint sink when due (checkpoint_every, the last
///     step, a stop request); stop when requested
/// The loop runs until options.total_steps optimizer steps are taken. Checkpoints are taken only
/// at window boundaries, so a resumed run never needs a partial window's gradient: it trains the
/// windows after the checkpoint again, from the same state, to the same result.
class Trainer {
 public:
  using Clock = std::chrono::steady_clock;

  Trainer(const TrainingSetup& setup, TrainerOptions options);
  /// Adds a receiver of window and evaluation records (not owned).
  void add_sink(metrics::MetricsSink* sink) { sinks_.push_back(sink); }
  /// Continues from `state` (saved by a CheckpointSink) instead of starting from the first window.
  /// The model, optimizer, loss scaler and random generators must already hold their state of
  /// that boundary (engine::load_checkpoint restores them). Call before fit(). Throws InputError
  /// for a state that does not fit this run (a micro-batch above the global batch, a position
  /// outside the data, more steps than the run has).
  void resume(const LoopState& state);
  /// Trains until options.total_steps optimizer steps are taken (counting those before a resume).
  TrainSummary fit();
  /// Mean validation loss over the first eval_samples validation samples, without gradients.
  metrics::EvalRecord evaluate();

 private:
  /// What fit() carries from window to window besides the trainer's counters.
  struct RunProgress {
    TrainSummary summary;
    double seconds_before = 0.0;  ///< wall time of the run before a resume
    Clock::time_point start;      ///< when this fit() began
    bool has_val = false;         ///< validation data to evaluate on
  };
  /// Data parallel: rank 0's weights broadcast, the gradient reducer handed to `accumulator`.
  void join_data_parallel(GradientAccumulator& accumulator);
  /// The summary at the start (a resumed run's so far) and the first evaluation when due.
  RunProgress start_run(GradientAccumulator& accumulator);
  /// Phase 4: counters, the window's record to the sinks, evaluation when due.
  void observe(RunProgress& run, const Window& window, const WindowResult& result,
               double step_seconds, const dist::CommStats& comm_before);
  /// Phase 5: a checkpoint when due; true when the run stops here on request.
  bool persist(RunProgress& run, const Window& window, const WindowResult& result);
  /// The summary's micro-batch, loss scale and wall time as of now.
  void update_totals(RunProgress& run) const;
  /// A window's micro-batches, gathered and counted before the first forward pass.
  struct PreparedWindow {
    std::vector<data::Batch> batches;
    std::vector<Counts> counts;
    Counts total;
  };
  /// Takes the window's micro-batches from the feed and counts them, then lets the feed request
  /// up to `windows_ahead` windows after it.
  PreparedWindow prepare(WindowFeed& feed, const Window& window, int64_t windows_ahead) const;
  /// Phases 2 and 3 of a window, restarting it at half the micro-batch on out of memory.
  WindowResult run_window(GradientAccumulator& accumulator, WindowFeed& feed, const Window& window);
  /// Phase 2: hooks told, then forward + backward of every micro-batch of the window.
  void accumulate_window(GradientAccumulator& accumulator, WindowFeed& feed, const Window& window);
  /// Halves the micro-batch after out of memory in phase 2 (here, or on another rank: `where`)
  /// and re-requests the pending windows.
  void restart_window(const GradientAccumulator& accumulator, WindowFeed& feed,
                      const Window& window, const std::string& where);
  /// Phase 3: the boundary, then the hooks; out of memory here is an error, not a restart.
  WindowResult finish_window(GradientAccumulator& accumulator);
  metrics::WindowRecord make_record(const WindowResult& result, int64_t epoch, double step_seconds,
                                    double elapsed_seconds) const;
  void report_eval(metrics::EvalRecord record);
  void notify(const std::string& message);
  /// Tells the sinks about a skipped window; throws NonFiniteError after too many in a row.
  void on_skipped(const WindowResult& result, int64_t consecutive);
  /// Hands the state after the window that ended at `position` to the checkpoint sink.
  void save_checkpoint(const TrainSummary& summary, const DataPosition& position);
  /// Whether to stop now: the stop request, agreed over the ranks.
  bool stop_requested();
  /// This rank's shard of a window of `samples`.
  ShardRange shard_of(int64_t samples) const;

  TrainingSetup setup_;
  TrainerOptions options_;
  Plan plan_;  ///< a copy: the micro-batch can shrink after running out of memory
  /// The most samples an evaluation pass takes after one ran out of memory; 0: no limit.
  int64_t eval_batch_limit_ = 0;
  /// Where the model is (core::device_of): batches are moved there, its memory is reported.
  torch::Device device_{torch::kCPU};
  std::unique_ptr<BatchTransfer> transfer_;  ///< batches to device_
  std::vector<metrics::MetricsSink*> sinks_;
  int64_t steps_taken_ = 0;
  std::optional<LoopState> resume_from_;  ///< set by resume()
  int64_t windows_ = 0;                   ///< windows taken, skipped ones included
  int64_t consecutive_skips_ = 0;
  /// setup.communicator, or dist::single_process() when there is none.
  dist::Communicator* communicator_ = nullptr;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  std::unique_ptr<dist::GradientReducer> reducer_;  ///< data parallel, during fit()
  /// With options.concurrent_micro_batches > 1: the helper threads of a window's passes.
  std::unique_ptr<ConcurrentMicroBatches> concurrent_;
};

}  // namespace bigbatch::engine
