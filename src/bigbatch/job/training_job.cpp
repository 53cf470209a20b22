#include "bigbatch/job/training_job.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/error_message.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/dist/agreement.h"
#include "bigbatch/dist/local_communicator.h"
#include "bigbatch/dist/worker_environment.h"
#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/job/concurrency_choice.h"
#include "bigbatch/job/micro_batch_trial.h"
#include "bigbatch/job/plan_table.h"
#include "bigbatch/job/run_chart_files.h"
#include "bigbatch/job/run_directory.h"
#include "bigbatch/job/stop_signals.h"
#include "bigbatch/job/training_parts.h"
#include "bigbatch/memory/device_memory.h"
#include "bigbatch/memory/tracker.h"
#include "bigbatch/metrics/jsonl_sink.h"
#include "bigbatch/metrics/progress.h"
#include "bigbatch/metrics/tensorboard_sink.h"
#include "bigbatch/nn/row_split_products.h"

namespace bigbatch::job {

std::string to_string(LossScaleMode mode) {
  switch (mode) {
    case LossScaleMode::kAuto:
      return "auto";
    case LossScaleMode::kDynamic:
      return "dynamic";
    case LossScaleMode::kOff:
      return "off";
  }
  return "?";
}

LossScaleMode parse_loss_scale_mode(const std::string& text, const std::string& field) {
  for (const LossScaleMode mode :
       {LossScaleMode::kAuto, LossScaleMode::kDynamic, LossScaleMode::kOff}) {
    if (text == to_string(mode))
      return mode;
  }
  throw InputError(
      cat(field, " = \"", text, "\" is not a loss scale mode; expected auto, dynamic or off"));
}

bool loss_scaling_enabled(const TrainingJobOptions& options) {
  return options.loss_scale == LossScaleMode::kDynamic ||
         (options.loss_scale == LossScaleMode::kAuto && options.precision == nn::Precision::kFp16);
}

namespace {

namespace fs = std::filesystem;

/// The ranks of the job the environment names (RANK, WORLD_SIZE, ...), or a job of one rank
/// (dist::LocalCommunicator) without one.
std::unique_ptr<dist::Communicator> join(const std::optional<dist::WorkerEnvironment>& worker,
                                         const TrainingJobOptions& options) {
  if (!worker || worker->world_size == 1)
    return std::make_unique<dist::LocalCommunicator>();
  return dist::connect(dist::ProcessGroupOptions()
                           .worker(*worker)
                           .timeout_seconds(options.dist_timeout)
                           .backend(options.dist_backend));
}

/// Refuses a memory budget below what every step holds whatever its micro-batch: the tensors in
/// use now (parameters, buffers), the gradients and the optimizer state.
void check_budget_holds_training_state(const TrainingJobOptions& options, const Workload& w) {
  if (options.memory_budget <= 0)
    return;
  const int64_t in_use = memory::current_bytes(options.device);
  const int64_t gradients = trainable_parameter_bytes(*w.module);
  const int64_t state = optimizer_state_bytes(options.optimizer, *w.module);
  const int64_t needed = in_use + gradients + state;
  BB_CHECK_INPUT(options.memory_budget >= needed,
                 "TrainingJobOptions.memory_budget = ", format_bytes(options.memory_budget),
                 " cannot hold the training state: ", format_bytes(in_use),
                 " in use at start (the model, and data held as tensors), ",
                 format_bytes(gradients), " of gradients and ", format_bytes(state),
                 " of optimizer state make ", format_bytes(needed),
                 " before any activation; raise it well above that, or train fewer parameters "
                 "(adapters)");
}

/// The plan of the run, with epochs -> steps and, for auto_micro_batch on a new run, the trial
/// under the budget, agreed over the ranks (the smallest size any rank can hold). Fills the
/// steps, windows per epoch and search of `facts`.
engine::Plan resolve_run_plan(const TrainingJobOptions& options, const Workload& w,
                              dist::Communicator& ranks, bool resuming, PlanFacts& facts) {
  engine::BatchOptions batch = options.batch;
  batch.world_size(ranks.world_size());
  if (options.auto_micro_batch)
    batch.micro_batch(batch.global_batch() / ranks.world_size()).accum_steps(0);
  const engine::Plan plan = engine::resolve_plan(batch);
  BB_CHECK_INPUT(w.train->size() >= plan.global_batch, "the training split holds ", w.train->size(),
                 " samples, fewer than the global batch of ", plan.global_batch,
                 "; use more data or a smaller global batch");
  facts.windows_per_epoch =
      engine::WindowSampler(w.train->size(), plan.global_batch, options.trainer.seed())
          .windows_per_epoch();
  facts.steps =
      options.epochs > 0 ? options.epochs * facts.windows_per_epoch : options.trainer.total_steps();
  check_budget_holds_training_state(options, w);
  memory::set_budget_bytes(options.device, options.memory_budget);
  if (!options.auto_micro_batch || resuming)
    return plan;
  BB_CHECK_INPUT(options.memory_budget > 0,
                 "auto_micro_batch needs a memory_budget to fit the micro-batch in");
  const engine::MicroBatchSearchResult found = search_micro_batch(
      w, MicroBatchTrialOptions()
             .global_batch(plan.rank_batch())
             .budget_bytes(options.memory_budget)
             .reserved_bytes(optimizer_state_bytes(options.optimizer, *w.module))
             .concurrent_micro_batches(options.trainer.concurrent_micro_batches()));
  facts.micro_batch_search = found.describe();
  return even_plan(batch, dist::agree_on_micro_batch(&ranks, found.micro_batch));
}

/// Restores the newest usable checkpoint of the run being resumed and sets `plan`'s micro-batch
/// to the one in use there (unless the caller changed it). Empty when the run finished already.
std::optional<engine::LoadedCheckpoint> resume_state(const RunOptions& run,
                                                     const engine::CheckpointParts& parts,
                                                     int64_t steps, engine::Plan& plan,
                                                     std::ostream& out) {
  for (const std::string& notice : run.resume_notices)
    out << "resume: " << notice << "\n";
  engine::LoadedCheckpoint loaded =
      engine::load_newest_checkpoint(run.resume_dir + "/checkpoints", parts);
  for (const std::string& skipped : loaded.skipped)
    out << "resume: passed over " << skipped << "\n";
  const engine::LoopState& state = loaded.state;
  out << "resume: from " << loaded.path << " (optimizer step " << state.summary.steps << ", epoch "
      << state.data.epoch << ", sample " << state.data.cursor << ")\n";
  BB_CHECK_INPUT(state.summary.steps <= steps, loaded.path, " is at optimizer step ",
                 state.summary.steps, ", beyond the ", steps, " steps of the resumed run");
  std::error_code error;
  if (state.summary.steps == steps && fs::exists(run.resume_dir + "/summary.json", error)) {
    out << run.resume_dir << " finished all " << steps << " steps already; nothing to do\n";
    return std::nullopt;
  }
  if (run.keep_checkpoint_micro_batch)
    plan.set_micro_batch(state.micro_batch);
  else
    loaded.state.micro_batch = plan.micro_batch;
  return loaded;
}

/// Everything prepared for training, before the run directory is touched.
struct PreparedRun {
  std::unique_ptr<dist::Communicator> ranks;  ///< never null: a job of one rank when alone
  Workload workload;
  engine::Plan plan;
  TrainingParts parts;
  engine::CheckpointParts checkpoint_parts;
  std::optional<engine::LoadedCheckpoint> resumed;
  PlanFacts facts;
};

/// Trains under the stop signals and tells the other ranks that this one is done.
engine::TrainSummary fit(PreparedRun& run, engine::TrainingSetup setup,
                         const std::vector<metrics::MetricsSink*>& sinks) {
  setup.stop_requested = &StopSignals::requested();
  engine::Trainer trainer(setup, run.parts.trainer);
  if (run.resumed)
    trainer.resume(run.resumed->state);
  for (metrics::MetricsSink* sink : sinks)
    trainer.add_sink(sink);
  engine::TrainSummary summary;
  {
    const StopSignals signals;
    summary = trainer.fit();
  }
  run.ranks->any(false, "the end of training");
  return summary;
}

/// The end of rank 0's run: the stop message, or the sample, charts, summary.json and the last
/// lines.
JobResult finish(const TrainingJobOptions& options, const PreparedRun& run,
                 const engine::TrainSummary& summary, const std::string& run_dir,
                 const std::string& last_checkpoint, std::ostream& out) {
  JobResult result{0, summary, run_dir, ""};
  if (summary.stopped) {
    result.exit_code = 128 + StopSignals::signal_number();
    out << "\nstopped by signal " << StopSignals::signal_number() << " after optimizer step "
        << summary.steps << "; checkpoint " << last_checkpoint << "\n";
    if (options.run.resume_command)
      out << "resume with: " << options.run.resume_command(run_dir) << "\n";
    return result;
  }
  const Workload& w = run.workload;
  if (w.generate_sample) {
    // The run is trained and checkpointed: a sample that fails is reported, and the summary and
    // charts are written all the same.
    try {
      const nn::AutocastGuard autocast(options.precision, options.device.type());
      result.sample = w.generate_sample();
      out << "\n" << w.sample_heading << ":\n" << result.sample << "\n";
    } catch (const std::exception& error) {
      out << "\nnote: no sample: " << message_of(error) << "\n";
    }
  }
  write_run_charts({run_dir}, run_dir + "/charts");
  write_summary(run_dir, summary, result.sample);
  const std::string validation =
      std::isfinite(summary.first_val_loss)
          ? cat("val loss ", summary.first_val_loss, " -> ", summary.last_val_loss)
          : std::string("no validation split");
  // What model.row_split = "auto" chose for the bf16 products, where it tried anything.
  const std::string products = nn::describe(nn::row_split_counts());
  if (!products.empty())
    out << "\n" << products;
  out << "\nfinished " << summary.steps << " steps in " << human_duration(summary.seconds)
      << (summary.skipped_steps > 0 ? cat(" (", summary.skipped_steps, " windows skipped)") : "")
      << ": train loss " << summary.last_train_loss << ", " << validation
      << (summary.last_val_accuracy ? cat(", val accuracy ", *summary.last_val_accuracy)
                                    : std::string())
      << "\nrun directory: " << run_dir << "\n";
  return result;
}

/// Rank 0: the run directory, the standard sinks and the checkpointer around fit().
JobResult lead(const TrainingJobOptions& options, PreparedRun& run,
               const std::vector<metrics::MetricsSink*>& extra_sinks, std::ostream& out) {
  const bool resuming = run.resumed.has_value();
  const Workload& w = run.workload;
  const std::string run_dir =
      resuming ? options.run.resume_dir : create_run_dir(options.run.directory, w.name);
  run.facts.run_dir = run_dir;
  const std::string table = plan_table(options, w, run.plan, run.facts).render();
  out << table << std::flush;
  if (resuming)
    rewind_run_dir(run_dir, *run.resumed, out);
  if (!options.run.config_text.empty())
    io::write_file_atomically(run_dir + "/config.toml", options.run.config_text);
  io::write_file_atomically(run_dir + "/plan.txt", table);

  metrics::JsonlSink metrics_file(run_dir + "/metrics.jsonl", /*append=*/resuming);
  metrics::ProgressOptions progress_options;
  progress_options.interactive = &out == &std::cout && metrics::is_terminal(1);
  progress_options.log_every = options.run.log_every;
  progress_options.count_tokens = w.objective->unit() == engine::LossUnit::kToken;
  metrics::ProgressPrinter progress(out, progress_options);
  metrics::TensorBoardOptions tensorboard;
  tensorboard.directory = run_dir;
  tensorboard.count_tokens = progress_options.count_tokens;
  tensorboard.resumed_after_step = resuming ? run.resumed->state.summary.steps : 0;
  metrics::TensorBoardSink events_file(tensorboard);
  engine::Checkpointer checkpointer(run.checkpoint_parts, engine::CheckpointOptions()
                                                              .directory(run_dir + "/checkpoints")
                                                              .keep(options.run.checkpoint_keep));
  // What a checkpoint needs beyond tensors: the config to compare on resume, the metrics length
  // to cut back to, and the model spec from which `bigbatch export` rebuilds the model.
  checkpointer.set_annotation([&options, &metrics_file, &w] {
    nlohmann::ordered_json annotation;
    annotation["config"] = options.run.config_text;
    annotation["metrics_bytes"] = metrics_file.bytes();
    annotation["model"] = w.model_spec;
    return annotation.dump();
  });
  engine::TrainingSetup setup = training_setup(w, run.parts, run.plan, run.ranks.get());
  setup.checkpoints = &checkpointer;
  std::vector<metrics::MetricsSink*> sinks = {&metrics_file, &events_file, &progress};
  sinks.insert(sinks.end(), extra_sinks.begin(), extra_sinks.end());
  const engine::TrainSummary summary = fit(run, setup, sinks);
  return finish(options, run, summary, run_dir, checkpointer.last_path(), out);
}

/// The workload, checked, on the job's device, with the loss under autocast for the job's
/// precision there.
Workload build_checked(const WorkloadBuilder& build, const TrainingJobOptions& options) {
  Workload w = build();
  BB_CHECK_INPUT(w.module != nullptr, "the workload has no module");
  BB_CHECK_INPUT(w.train != nullptr, "the workload has no training data");
  BB_CHECK_INPUT(w.objective != nullptr, "the workload has no objective");
  place_workload(w, options);
  return w;
}

}  // namespace

TrainingJob::TrainingJob(TrainingJobOptions options, WorkloadBuilder build)
    : options_(std::move(options)), build_(std::move(build)) {
  BB_CHECK_INPUT(static_cast<bool>(build_), "TrainingJob needs a workload builder");
}

JobResult TrainingJob::run(std::ostream& terminal) {
  const std::optional<dist::WorkerEnvironment> worker = dist::read_worker_environment();
  // Only rank 0 prints and writes files; the others report errors only.
  std::ostream quiet(nullptr);
  const bool leader = !worker || worker->rank == 0;
  std::ostream& out = leader ? terminal : quiet;
  const bool resuming = !options_.run.resume_dir.empty();
  PreparedRun run;
  run.facts.threads = apply_thread_options(options_, worker ? worker->local_world_size : 1);
  memory::MemoryTracker::instance().install();  // before any tensor exists: every byte counts
  memory::MemoryTracker::instance().set_reuse_freed_blocks(options_.reuse_freed_blocks);
  // One GPU per rank, current before NCCL creates its communicators and streams on it.
  if (worker)
    options_.device = rank_device(options_.device, worker->local_rank, cuda_availability());
  make_current(options_.device);
  // Joined before the data are loaded: a rank that cannot start is found out early.
  run.ranks = join(worker, options_);
  torch::manual_seed(options_.trainer.seed());
  run.workload = build_checked(build_, options_);
  run.plan = resolve_run_plan(options_, run.workload, *run.ranks, resuming, run.facts);
  const int64_t processes = worker ? worker->local_world_size : 1;
  if (options_.auto_concurrent_micro_batches) {
    const ConcurrencyChoice choice = choose_concurrent_micro_batches(
        options_, run.workload, run.plan, std::max<int64_t>(1, available_cores() / processes));
    options_.trainer.concurrent_micro_batches(choice.passes);
    run.facts.concurrency = choice.why;
    if (choice.passes > 1)
      run.facts.threads = apply_thread_options(options_, processes);  // each pass its share
  }
  if (options_.trainer.concurrent_micro_batches() > 1)
    options_.trainer.evaluation_threads(one_pass_openmp_threads(options_, processes));
  BB_CHECK_INPUT(
      options_.trainer.concurrent_micro_batches() == 1 || run.workload.concurrency_need.empty(),
      "TrainerOptions.concurrent_micro_batches = ", options_.trainer.concurrent_micro_batches(),
      " needs ", run.workload.concurrency_need);
  // Ranks draw different dropout masks (the model itself came from the same seed everywhere, and
  // the trainer broadcasts rank 0's weights anyway).
  if (run.ranks->world_size() > 1)
    torch::manual_seed(options_.trainer.seed() +
                       static_cast<uint64_t>(run.ranks->rank()) * 1000003);
  run.parts = make_training_parts(options_, run.workload, run.plan, run.facts.steps);
  run.checkpoint_parts = {run.workload.module.get(), run.parts.optimizer.get(),
                          run.parts.loss_scaler.get(), &run.plan, run.ranks->rank()};
  if (resuming) {
    run.resumed = resume_state(options_.run, run.checkpoint_parts, run.facts.steps, run.plan, out);
    if (!run.resumed)
      return {};  // finished already
  }
  if (options_.run.plan_only) {
    out << plan_table(options_, run.workload, run.plan, run.facts).render();
    return {};
  }
  if (leader)
    return lead(options_, run, extra_sinks_, out);
  const engine::TrainSummary summary =
      fit(run, training_setup(run.workload, run.parts, run.plan, run.ranks.get()), {});
  return {summary.stopped ? 128 + StopSignals::signal_number() : 0, summary, "", ""};
}

}  // namespace bigbatch::job
