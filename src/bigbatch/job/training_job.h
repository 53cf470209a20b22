// A whole training run as a library call: everything `bigbatch train` does between its options
// and a finished run directory.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "bigbatch/core/threads.h"
#include "bigbatch/dist/process_group.h"
#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/lr_schedule.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/job/workload.h"
#include "bigbatch/metrics/sink.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/row_split_products.h"

namespace bigbatch::job {

/// Whether the loss is scaled dynamically.
enum class LossScaleMode {
  kAuto,     ///< only where fp16 is in use (precision = fp16)
  kDynamic,  ///< always, in any precision (to rehearse it, or for fp16 run another way)
  kOff,      ///< never
};

/// The spelling of a mode: "auto", "dynamic", "off".
std::string to_string(LossScaleMode mode);
/// The mode spelled `text`; throws InputError starting with `field` otherwise.
LossScaleMode parse_loss_scale_mode(const std::string& text, const std::string& field);

/// Where a run's files go and how it starts.
struct RunOptions {
  /// The run directory; empty: runs/<Workload::name>-<YYYYmmdd-HHMMSS>. A new run refuses a
  /// directory that holds files.
  std::string directory;
  /// Continue the run in this directory from its newest usable checkpoint; empty: a new run.
  std::string resume_dir;
  /// On resume, train on with the micro-batch the checkpoint was using (smaller than the plan's
  /// after running out of memory); false: the plan's (the caller changed it on purpose).
  bool keep_checkpoint_micro_batch = true;
  /// Written to <run>/config.toml and saved in every checkpoint; empty: no config.toml.
  std::string config_text;
  /// Print the plan and stop; nothing is written.
  bool plan_only = false;
  int64_t checkpoint_keep = 3;  ///< newest checkpoint files kept in <run>/checkpoints
  int64_t log_every = 10;       ///< progress line every N steps when the output is no terminal
  /// Printed before the plan table on resume (for example the accepted config changes).
  std::vector<std::string> resume_notices;
  /// The command that resumes a stopped run in `run_dir`, printed when a signal stopped it;
  /// may be empty.
  std::function<std::string(const std::string& run_dir)> resume_command;
};

/// Everything a job needs besides its workload. Each field is a library Options struct.
struct TrainingJobOptions {
  /// The batch: global batch, micro-batch or accumulation steps, lr scaling. world_size is set
  /// from the ranks of the job.
  engine::BatchOptions batch;
  /// Choose the micro-batch (and accum_steps) as the largest that fits memory_budget.
  bool auto_micro_batch = false;
  /// Choose trainer.concurrent_micro_batches for the machine and the workload
  /// (job::choose_concurrent_micro_batches) instead of taking it as set.
  bool auto_concurrent_micro_batches = false;
  int64_t memory_budget = 0;  ///< bytes of tensor memory allowed on `device`; 0 = unlimited
  /// Keep freed CPU tensor blocks for reuse (MemoryTracker::set_reuse_freed_blocks).
  bool reuse_freed_blocks = true;
  /// Passes over the training split; > 0 replaces trainer.total_steps with epochs x windows.
  int64_t epochs = 0;
  /// The loop: steps, evaluation, clipping, non-finite windows, prefetch, concurrency,
  /// checkpoint interval, buckets. trainer.seed also seeds the model's initialisation.
  engine::TrainerOptions trainer;
  engine::OptimizerOptions optimizer;  ///< lr is replaced by the plan's
  engine::LrScheduleOptions schedule;  ///< peak_lr and total_steps come from the plan
  LossScaleMode loss_scale = LossScaleMode::kAuto;
  engine::LossScalerOptions loss_scaler;  ///< when loss scaling is enabled
  /// Where the model trains: the CPU or one GPU (bigbatch::parse_device). The workload's module
  /// is moved there once built; batches follow it, and memory_budget is that device's.
  c10::Device device = c10::Device(c10::kCPU);
  nn::Precision precision = nn::Precision::kFp32;  ///< autocast of every forward pass
  nn::Bf16Matmul bf16_matmul = nn::Bf16Matmul::kAuto;
  nn::Fp32Matmul fp32_matmul = nn::Fp32Matmul::kAuto;  ///< kernels of the float32 products
  nn::RowSplit row_split = nn::RowSplit::kAuto;  ///< bf16 CPU products split by rows over threads
  nn::AttentionKernel attention = nn::AttentionKernel::kAuto;  ///< of the transformers
  nn::BlockKernel block_kernel = nn::BlockKernel::kAuto;       ///< of the transformers' blocks
  /// Threads: the backend of the model's fp32 work (oneDNN for convolutions); 0 = automatic.
  ThreadRequest threads;
  /// Data parallel, when the environment names this process a rank (RANK, WORLD_SIZE, ...).
  double dist_timeout = 300.0;
  dist::Backend dist_backend = dist::Backend::kGloo;
  RunOptions run;
};

/// Whether `options` scale the loss: loss_scale dynamic, or auto with fp16.
bool loss_scaling_enabled(const TrainingJobOptions& options);

/// How a job ended.
struct JobResult {
  int exit_code = 0;             ///< 0, or 128 + the signal that stopped it
  engine::TrainSummary summary;  ///< empty for plan_only and a run that had finished already
  std::string run_dir;           ///< empty when nothing was written
  std::string sample;            ///< the final sample, if the workload makes one
};

/// A training run: joins the data-parallel job the environment names (if any), seeds, builds
/// the workload, resolves the plan (epochs -> steps, micro_batch = auto with its trial, agreed
/// over the ranks), prints the plan table, creates (or, resuming, rewinds) the run directory,
/// trains with the standard sinks (metrics.jsonl, TensorBoard events, progress) and checkpoints,
/// stops cleanly on SIGINT/SIGTERM, and writes the final sample, charts/ and summary.json.
/// Usage:
///
///   job::TrainingJobOptions options;
///   options.batch.global_batch(64).micro_batch(8);
///   options.trainer.total_steps(100);
///   job::TrainingJob job(options, [] { return my_workload(); });
///   job::JobResult result = job.run(std::cout);
///
/// Everything the caller supplied is checked before the run directory is created; the
/// directory counts as finished only once summary.json is in it. Only rank 0 prints and writes.
class TrainingJob {
 public:
  TrainingJob(TrainingJobOptions options, WorkloadBuilder build);
  /// Adds a receiver of window and evaluation records besides the standard ones (not owned;
  /// rank 0 only).
  void add_sink(metrics::MetricsSink* sink) { extra_sinks_.push_back(sink); }
  /// Runs the job, printing the plan and progress to `out`. Throws InputError for bad input.
  JobResult run(std::ostream& out);

 private:
  TrainingJobOptions options_;
  WorkloadBuilder build_;
  std::vector<metrics::MetricsSink*> extra_sinks_;
};

}  // namespace bigbatch::job
