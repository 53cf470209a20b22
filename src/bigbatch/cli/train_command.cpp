#include "bigbatch/cli/train_command.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "bigbatch/cli/data_parallel_job.h"
#include "bigbatch/cli/model_spec.h"
#include "bigbatch/cli/plot_command.h"
#include "bigbatch/cli/resume.h"
#include "bigbatch/cli/run_dir.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/cli/workload.h"
#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"
#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/memory/tracker.h"
#include "bigbatch/metrics/jsonl_sink.h"
#include "bigbatch/metrics/progress.h"
#include "bigbatch/metrics/tensorboard_sink.h"
#include "bigbatch/models/model_info.h"

namespace bigbatch::cli {

namespace {

namespace fs = std::filesystem;

/// What the plan table shows.
struct PlanView {
  const TrainConfig& config;
  const engine::Plan& plan;
  const Workload& w;
  const LoadedData& data;
  int64_t steps = 0;
  int64_t windows_per_epoch = 0;
  std::string micro_batch_search;  ///< how "auto" chose, or empty
  std::string run_dir;             ///< empty when nothing is written
  ThreadSettings threads;          ///< OpenMP and OpenBLAS threads in effect
};

/// The loss_scale and on_nonfinite rows of the optimization section.
void add_nonfinite_rows(Table& table, const TrainConfig& config) {
  const engine::LossScalerOptions& scaler = config.loss_scaler;
  if (loss_scaling_enabled(config)) {
    table.add("loss_scale", "dynamic",
              cat("init ", scaler.init_scale(), ", x", scaler.growth_factor(), " after ",
                  scaler.growth_interval(), " clean windows, x", scaler.backoff_factor(),
                  " on overflow, min ", scaler.min_scale()));
  } else {
    table.add("loss_scale", "off",
              config.loss_scale == LossScaleMode::kAuto ? "auto: only with fp16, not in use"
                                                        : "not scaled");
  }
  table.add("on_nonfinite", engine::to_string(config.on_nonfinite),
            config.on_nonfinite == engine::NonFinitePolicy::kSkip
                ? cat("inf/NaN window dropped, no step; stop after ", config.max_consecutive_skips,
                      " in a row")
                : std::string("stop at the first inf/NaN loss or gradient"));
}

Table plan_table(const PlanView& view) {
  const TrainConfig& config = view.config;
  const engine::Plan& plan = view.plan;
  const Workload& w = view.w;
  const int64_t steps = view.steps;
  const int64_t windows_per_epoch = view.windows_per_epoch;
  Table table("bigbatch plan");
  table.section("model");
  table.add("model", to_string(config.model), w.description);
  table.add("parameters", human_count(static_cast<double>(models::parameter_count(*w.module))),
            config.float64 ? "float64" : "float32");
  table.add("precision", nn::to_string(config.precision),
            config.precision == nn::Precision::kFp32
                ? std::string("no autocast")
                : cat("forward passes autocast to ", nn::to_string(config.precision),
                      "; weights, gradients and accumulation in float32"));
  if (config.precision == nn::Precision::kBf16) {
    const bool fp32_kernels = nn::bf16_matmul() == nn::Bf16Matmul::kFp32;
    table.add("bf16 matmuls", fp32_kernels ? "fp32 kernels" : "native",
              cat(fp32_kernels ? "bf16-rounded operands and results, fp32 arithmetic"
                               : "oneDNN's bf16 kernels",
                  " (model.bf16_matmul = \"", nn::to_string(config.bf16_matmul), "\")"));
  }
  if (config.model != ModelKind::kMlp) {
    table.add("checkpointing", config.checkpointing.to_string(),
              config.checkpointing.mode == nn::CheckpointMode::kNone
                  ? "activations kept for backward"
                  : "recomputed in backward: less memory, more time");
  }
  if (w.batch_norms > 0) {
    const std::string notice = engine::batch_norm_notice(w.batch_norms, plan, config.norm_policy);
    table.add(
        "norm_policy", engine::to_string(config.norm_policy),
        notice.empty() ? "one micro-batch per window: BatchNorm sees the whole batch" : notice);
  }
  table.section("data");
  table.add("source", view.data.description);
  table.add("train", w.train->describe());
  table.add("validation", w.val ? w.val->describe() : "none");
  table.section("batch");
  plan.describe(table);
  if (!view.micro_batch_search.empty()) {
    table.add("micro_batch auto", view.micro_batch_search, "largest that fits memory.budget");
  }
  const memory::MemoryTracker& tracker = memory::MemoryTracker::instance();
  table.add("memory.budget", config.memory_budget > 0 ? format_bytes(config.memory_budget) : "none",
            cat("tensor memory; ", format_bytes(tracker.current_bytes()), " in use at start"));
  table.section("optimization");
  table.add("optimizer", engine::to_string(config.optim.kind()),
            config.optim.kind() == engine::OptimizerKind::kAdamW
                ? cat("betas (", config.optim.beta1(), ", ", config.optim.beta2(),
                      "), weight decay ", config.optim.weight_decay())
                : cat("momentum ", config.optim.momentum(), ", weight decay ",
                      config.optim.weight_decay()));
  table.add("schedule", engine::to_string(config.schedule.kind()),
            cat(config.schedule.warmup_steps(), " warmup steps, final lr x",
                config.schedule.min_lr_ratio()));
  table.add("max_grad_norm", cat(config.max_grad_norm), "clipping of the window gradient");
  add_nonfinite_rows(table, config);
  table.add("loss", w.objective->unit() == engine::LossUnit::kToken ? "per token" : "per sample",
            "mean over the whole window");
  table.section("run");
  table.add(
      "steps", std::to_string(steps),
      cat(windows_per_epoch, " windows per epoch (",
          format_fixed(static_cast<double>(steps) / static_cast<double>(windows_per_epoch), 2),
          " epochs)"));
  const bool onednn = view.threads.backend == MatmulBackend::kOneDnn;
  table.add(
      "threads", std::to_string(view.threads.openmp),
      onednn ? "OpenMP; oneDNN (convolutions, bf16 matmuls) runs over these" : "OpenMP (intra-op)");
  table.add(
      "blas_threads", view.threads.blas > 0 ? std::to_string(view.threads.blas) : std::string("-"),
      onednn ? "OpenBLAS (fp32 matmuls; few in bf16)" : "OpenBLAS; fp32 matmuls run on these");
  if (config.concurrent_micro_batches > 1) {
    table.add("concurrent", std::to_string(config.concurrent_micro_batches),
              "micro-batches of a window run at once, one per thread; their activations exist "
              "at once");
  }
  table.add("run_dir", view.run_dir.empty() ? "(not written)" : view.run_dir);
  return table;
}

void write_summary(const std::string& run_dir, const engine::TrainSummary& s,
                   const std::string& sample) {
  const double tokens_per_second = static_cast<double>(s.tokens) / s.train_seconds;
  const nlohmann::json summary = {
      {"finished", true},
      {"steps", s.steps},
      {"epochs_started", s.epochs_started},
      {"last_train_loss", s.last_train_loss},
      {"first_val_loss", std::isfinite(s.first_val_loss) ? nlohmann::json(s.first_val_loss)
                                                         : nlohmann::json(nullptr)},
      {"last_val_loss",
       std::isfinite(s.last_val_loss) ? nlohmann::json(s.last_val_loss) : nlohmann::json(nullptr)},
      {"last_val_accuracy",
       s.last_val_accuracy ? nlohmann::json(*s.last_val_accuracy) : nlohmann::json(nullptr)},
      {"samples", s.samples},
      {"tokens", s.tokens},
      {"seconds", s.seconds},
      {"train_seconds", s.train_seconds},
      {"tokens_per_second", tokens_per_second},
      {"peak_bytes", s.peak_bytes},
      {"final_micro_batch", s.final_micro_batch},
      {"skipped_steps", s.skipped_steps},
      {"final_loss_scale",
       s.final_loss_scale > 0 ? nlohmann::json(s.final_loss_scale) : nlohmann::json(nullptr)},
      {"sample", sample}};
  io::write_file_atomically(
      run_dir + "/summary.json",
      summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

/// Set from SIGINT or SIGTERM: the trainer stops at the next window boundary after a checkpoint.
std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};

void request_stop(int signal_number) {
  stop_signal.store(signal_number);
  stop_requested.store(true);
}

/// Routes SIGINT and SIGTERM to request_stop while it lives. SA_RESETHAND restores the default
/// action after the first, so a second signal stops the process at once.
class StopSignals {
 public:
  StopSignals() {
    stop_requested.store(false);
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

/// The config a run trains with and, when it continues an earlier run, where that run is.
struct RunStart {
  TrainConfig config;
  std::string resume_dir;            ///< non-empty: continue the run in this directory
  std::vector<std::string> notices;  ///< config changes accepted for the resumption
  bool micro_batch_changed = false;  ///< batch.micro_batch differs from the saved run's
};

bool has_checkpoints(const std::string& run_dir) {
  std::error_code error;
  const std::string directory = run_dir + "/checkpoints";
  return fs::is_directory(directory, error) && !engine::list_checkpoints(directory).empty();
}

std::string value_of(const std::vector<std::pair<std::string, std::string>>& values,
                     const std::string& key) {
  for (const auto& [name, value] : values) {
    if (name == key)
      return value;
  }
  return "";
}

/// A run directory that `bigbatch train` created and that died before its first checkpoint holds
/// nothing worth keeping; --auto-resume starts it again. Returns whether it was cleared.
bool clear_unstarted_run(const std::string& run_dir, std::ostream& out) {
  std::error_code error;
  const fs::path dir = run_dir;
  if (!fs::exists(dir / "config.toml", error) || fs::exists(dir / "summary.json", error))
    return false;
  const std::vector<std::string> ours = {"config.toml", "plan.txt", "metrics.jsonl", "checkpoints"};
  std::vector<fs::path> items;
  for (const auto& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (std::find(ours.begin(), ours.end(), name) == ours.end() &&
        name.rfind("events.out.tfevents.", 0) != 0)
      return false;  // someone else's file: leave the directory to create_run_dir's refusal
    items.push_back(item.path());
  }
  for (const fs::path& item : items)
    fs::remove_all(item, error);
  out << "auto-resume: " << run_dir
      << " holds a run that stopped before its first checkpoint; starting it again\n";
  return true;
}

/// `leader`: this process may clean the run directory (rank 0, or a single process).
RunStart decide_start(const TrainCommandOptions& options, bool leader, std::ostream& out) {
  RunStart start;
  if (!options.resume_dir.empty()) {
    BB_CHECK_INPUT(options.config_path.empty(), "--resume continues with the run's own config (",
                   options.resume_dir, "/config.toml); change keys with --set, not --config");
    BB_CHECK_INPUT(!options.auto_resume, "--resume and --auto-resume exclude each other");
    start.resume_dir = options.resume_dir;
  } else {
    start.config = load_config(options);
    if (options.auto_resume) {
      BB_CHECK_INPUT(!start.config.run_dir.empty(),
                     "--auto-resume needs a fixed run directory: pass --run-dir DIR or set "
                     "train.run_dir");
      if (has_checkpoints(start.config.run_dir))
        start.resume_dir = start.config.run_dir;
      else if (leader)
        clear_unstarted_run(start.config.run_dir, out);
    }
  }
  if (start.resume_dir.empty())
    return start;
  TrainCommandOptions saved_options;
  saved_options.config_path = start.resume_dir + "/config.toml";
  std::error_code error;
  BB_CHECK_INPUT(fs::exists(saved_options.config_path, error), start.resume_dir,
                 " is not a bigbatch run directory: it has no config.toml");
  const TrainConfig saved = load_config(saved_options);
  if (!options.resume_dir.empty()) {
    TrainCommandOptions resumed = saved_options;
    resumed.overrides = options.overrides;
    start.config = load_config(resumed);
  }
  start.notices = check_resume_changes(saved.resolved_values, start.config.resolved_values,
                                       options.allow_changes);
  start.micro_batch_changed = value_of(saved.resolved_values, "batch.micro_batch") !=
                              value_of(start.config.resolved_values, "batch.micro_batch");
  start.config.run_dir = start.resume_dir;
  return start;
}

/// Restores the newest usable checkpoint of the run being resumed into `parts` and sets `plan`'s
/// micro-batch to the one in use there (it may have shrunk after running out of memory), unless
/// the resumption changes batch.micro_batch. Empty when the run finished already.
std::optional<engine::LoadedCheckpoint> resume_state(const RunStart& start,
                                                     const engine::CheckpointParts& parts,
                                                     int64_t steps, engine::Plan& plan,
                                                     std::ostream& out) {
  for (const std::string& notice : start.notices)
    out << "resume: " << notice << "\n";
  engine::LoadedCheckpoint loaded =
      engine::load_newest_checkpoint(start.resume_dir + "/checkpoints", parts);
  for (const std::string& skipped : loaded.skipped)
    out << "resume: passed over " << skipped << "\n";
  const engine::LoopState& state = loaded.state;
  out << "resume: from " << loaded.path << " (optimizer step " << state.summary.steps << ", epoch "
      << state.data.epoch << ", sample " << state.data.cursor << ")\n";
  BB_CHECK_INPUT(state.summary.steps <= steps, loaded.path, " is at optimizer step ",
                 state.summary.steps, ", beyond the ", steps, " steps of the resumed run");
  std::error_code error;
  if (state.summary.steps == steps && fs::exists(start.resume_dir + "/summary.json", error)) {
    out << start.resume_dir << " finished all " << steps << " steps already; nothing to do\n";
    return std::nullopt;
  }
  if (start.micro_batch_changed) {
    loaded.state.micro_batch = plan.micro_batch;
  } else {
    plan.set_micro_batch(state.micro_batch);
  }
  return loaded;
}

/// Makes the run directory fit the checkpoint being resumed: the metrics file loses the lines
/// written after it (those windows are trained again), and summary.json goes (the run is not
/// finished any more).
void rewind_run_dir(const std::string& run_dir, const engine::LoadedCheckpoint& loaded,
                    std::ostream& out) {
  const nlohmann::json run = nlohmann::json::parse(loaded.run_json);
  const std::string metrics = run_dir + "/metrics.jsonl";
  if (run.contains("metrics_bytes") &&
      !truncate_metrics(metrics, run.at("metrics_bytes").get<int64_t>()))
    out << "resume: " << metrics << " is shorter than when the checkpoint was written; "
        << "appending to it as it is\n";
  std::error_code error;
  fs::remove(run_dir + "/summary.json", error);
}

}  // namespace

int run_train(const TrainCommandOptions& options, std::ostream& terminal) {
  BB_CHECK_INPUT(options.nproc >= 1, "--nproc ", options.nproc, " must be at least 1");
  if (options.nproc > 1)
    return launch_train(options, terminal);
  const std::optional<dist::WorkerEnvironment> worker = dist::read_worker_environment();
  const bool leader = !worker || worker->rank == 0;
  // Only rank 0 prints and writes files; the others report errors only.
  std::ostream quiet(nullptr);
  std::ostream& out = leader ? terminal : quiet;
  // Everything the user supplied is checked before anything is written.
  const RunStart start = decide_start(options, leader, out);
  const TrainConfig& config = start.config;
  const bool resuming = !start.resume_dir.empty();
  const ThreadSettings threads =
      apply_thread_settings(config, worker ? worker->local_world_size : 1);
  memory::MemoryTracker& tracker = memory::MemoryTracker::instance();
  tracker.install();  // before any tensor exists, so that every byte is counted
  // Joined before the data are loaded: a rank that cannot start is found out early.
  const std::unique_ptr<dist::Communicator> communicator = join_job(worker, config);
  const int64_t world_size = communicator ? communicator->world_size() : 1;
  const int64_t rank = communicator ? communicator->rank() : 0;
  torch::manual_seed(config.seed);
  const LoadedData data = load_data(config);
  Workload w = build_workload(config, data);
  engine::BatchOptions batch = config.batch;
  batch.world_size(world_size);
  if (config.auto_micro_batch)
    batch.micro_batch(batch.global_batch() / world_size);  // validated, then chosen
  engine::Plan plan = engine::resolve_plan(batch);
  BB_CHECK_INPUT(w.train->size() >= plan.global_batch, "the training split holds ", w.train->size(),
                 " samples, fewer than batch.global_batch = ", plan.global_batch,
                 "; use more data or a smaller global batch");
  const int64_t windows_per_epoch =
      engine::WindowSampler(w.train->size(), plan.global_batch, config.seed).windows_per_epoch();
  const int64_t steps = config.epochs > 0 ? config.epochs * windows_per_epoch : config.steps;
  tracker.set_budget(config.memory_budget);
  std::string micro_batch_search;
  if (config.auto_micro_batch && !resuming) {
    const engine::MicroBatchSearchResult found = search_micro_batch(config, w, plan.rank_batch());
    plan = even_plan(batch, agree_on_micro_batch(communicator.get(), found.micro_batch));
    micro_batch_search = found.describe();
  }
  // Ranks draw different dropout masks (the model itself came from the same seed everywhere, and
  // the trainer broadcasts rank 0's weights anyway).
  if (communicator)
    torch::manual_seed(config.seed + static_cast<uint64_t>(rank) * 1000003);
  const TrainingParts parts = make_training_parts(config, w, plan, steps);
  engine::CheckpointParts checkpoint_parts{w.module.get(), parts.optimizer.get(),
                                           parts.loss_scaler.get(), &plan};
  checkpoint_parts.rank = rank;
  std::optional<engine::LoadedCheckpoint> resumed;
  if (resuming) {
    resumed = resume_state(start, checkpoint_parts, steps, plan, out);
    if (!resumed)
      return 0;  // finished already
  }
  engine::validate(parts.options);

  if (options.plan_only) {
    out << plan_table(
               {config, plan, w, data, steps, windows_per_epoch, micro_batch_search, "", threads})
               .render();
    return 0;
  }
  engine::TrainingSetup setup = parts.setup(w, plan);
  setup.stop_requested = &stop_requested;
  setup.communicator = communicator.get();
  engine::TrainSummary summary;
  if (!leader) {
    engine::Trainer trainer(setup, parts.options);
    if (resumed)
      trainer.resume(resumed->state);
    const StopSignals signals;
    summary = trainer.fit();
    communicator->any(false, "the end of training");
    return summary.stopped ? 128 + stop_signal.load() : 0;
  }
  const std::string run_dir =
      resuming ? start.resume_dir : create_run_dir(config.run_dir, to_string(config.model));
  const Table table = plan_table(
      {config, plan, w, data, steps, windows_per_epoch, micro_batch_search, run_dir, threads});
  out << table.render() << std::flush;
  if (resumed)
    rewind_run_dir(run_dir, *resumed, out);
  io::write_file_atomically(run_dir + "/config.toml", config.resolved_toml);
  io::write_file_atomically(run_dir + "/plan.txt", table.render());

  metrics::JsonlSink metrics_file(run_dir + "/metrics.jsonl", /*append=*/resuming);
  metrics::ProgressOptions progress_options;
  progress_options.interactive = &terminal == &std::cout && metrics::is_terminal(1);
  progress_options.log_every = config.log_every;
  progress_options.count_tokens = w.objective->unit() == engine::LossUnit::kToken;
  metrics::ProgressPrinter progress(out, progress_options);
  metrics::TensorBoardOptions tensorboard;
  tensorboard.directory = run_dir;
  tensorboard.count_tokens = progress_options.count_tokens;
  tensorboard.resumed_after_step = resumed ? resumed->state.summary.steps : 0;
  metrics::TensorBoardSink events_file(tensorboard);
  engine::Checkpointer checkpointer(
      checkpoint_parts,
      engine::CheckpointOptions().directory(run_dir + "/checkpoints").keep(config.checkpoint_keep));
  // What a checkpoint needs beyond tensors: the config to compare on resume, the metrics length
  // to cut back to, and the model spec from which `bigbatch export` rebuilds the model.
  const nlohmann::ordered_json model_spec = spec_to_json(w.spec);
  checkpointer.set_annotation([&config, &metrics_file, &model_spec] {
    nlohmann::ordered_json run;
    run["config"] = config.resolved_toml;
    run["metrics_bytes"] = metrics_file.bytes();
    run["model"] = model_spec;
    return run.dump();
  });
  setup.checkpoints = &checkpointer;
  engine::Trainer trainer(setup, parts.options);
  if (resumed)
    trainer.resume(resumed->state);
  trainer.add_sink(&metrics_file);
  trainer.add_sink(&events_file);
  trainer.add_sink(&progress);
  {
    const StopSignals signals;
    summary = trainer.fit();
  }
  if (communicator)
    communicator->any(false, "the end of training");
  if (summary.stopped) {
    out << "\nstopped by signal " << stop_signal.load() << " after optimizer step " << summary.steps
        << "; checkpoint " << checkpointer.last_path() << "\nresume with: bigbatch train "
        << (world_size > 1 ? cat("--nproc ", world_size, " ") : std::string()) << "--resume "
        << run_dir << "\n";
    return 128 + stop_signal.load();
  }

  std::string sample;
  if (w.gpt && config.sample.max_new_bytes() > 0) {
    const nn::AutocastGuard autocast(config.precision, torch::kCPU);
    sample = models::generate_text(w.gpt, config.prompt, config.sample);
    out << "\nsample (temperature " << config.sample.temperature() << ", top-k "
        << config.sample.top_k() << "):\n"
        << sample << "\n";
  }
  write_run_charts({run_dir}, run_dir + "/charts");
  write_summary(run_dir, summary, sample);
  out << "\nfinished " << summary.steps << " steps in " << human_duration(summary.seconds)
      << (summary.skipped_steps > 0 ? cat(" (", summary.skipped_steps, " windows skipped)") : "")
      << ": train loss " << summary.last_train_loss << ", val loss " << summary.first_val_loss
      << " -> " << summary.last_val_loss
      << (summary.last_val_accuracy ? cat(", val accuracy ", *summary.last_val_accuracy)
                                    : std::string())
      << "\nrun directory: " << run_dir << "\n";
  return 0;
}

int run_config(const TrainCommandOptions& options, std::ostream& out) {
  out << load_config(options).resolved_toml;
  return 0;
}

}  // namespace bigbatch::cli
