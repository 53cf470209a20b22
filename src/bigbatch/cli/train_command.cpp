#include "bigbatch/cli/train_command.h"

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "bigbatch/cli/run_dir.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/cli/workload.h"
#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/memory/tracker.h"
#include "bigbatch/metrics/jsonl_sink.h"
#include "bigbatch/metrics/progress.h"
#include "bigbatch/models/model_info.h"

namespace bigbatch::cli {

namespace {

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

}  // namespace

int run_train(const TrainCommandOptions& options, std::ostream& out) {
  // Everything the user supplied is checked before anything is written.
  const TrainConfig config = load_config(options);
  const ThreadSettings threads = apply_thread_settings(config);
  memory::MemoryTracker& tracker = memory::MemoryTracker::instance();
  tracker.install();  // before any tensor exists, so that every byte is counted
  torch::manual_seed(config.seed);
  const LoadedData data = load_data(config);
  Workload w = build_workload(config, data);
  engine::BatchOptions batch = config.batch;
  if (config.auto_micro_batch)
    batch.micro_batch(batch.global_batch());  // validated, then chosen
  engine::Plan plan = engine::resolve_plan(batch);
  BB_CHECK_INPUT(w.train->size() >= plan.global_batch, "the training split holds ", w.train->size(),
                 " samples, fewer than batch.global_batch = ", plan.global_batch,
                 "; use more data or a smaller global batch");
  const int64_t windows_per_epoch =
      engine::WindowSampler(w.train->size(), plan.global_batch, config.seed).windows_per_epoch();
  const int64_t steps = config.epochs > 0 ? config.epochs * windows_per_epoch : config.steps;
  tracker.set_budget(config.memory_budget);
  std::string micro_batch_search;
  if (config.auto_micro_batch) {
    const engine::MicroBatchSearchResult found = search_micro_batch(config, w, plan.global_batch);
    plan = even_plan(batch, found.micro_batch);
    micro_batch_search = found.describe();
  }
  const TrainingParts parts = make_training_parts(config, w, plan, steps);
  engine::Trainer trainer(parts.setup(w, plan), parts.options);

  if (options.plan_only) {
    out << plan_table(
               {config, plan, w, data, steps, windows_per_epoch, micro_batch_search, "", threads})
               .render();
    return 0;
  }
  const std::string run_dir = create_run_dir(config.run_dir, to_string(config.model));
  const Table table = plan_table(
      {config, plan, w, data, steps, windows_per_epoch, micro_batch_search, run_dir, threads});
  out << table.render() << std::flush;
  io::write_file_atomically(run_dir + "/config.toml", config.resolved_toml);
  io::write_file_atomically(run_dir + "/plan.txt", table.render());

  metrics::JsonlSink metrics_file(run_dir + "/metrics.jsonl");
  metrics::ProgressOptions progress_options;
  progress_options.interactive = &out == &std::cout && metrics::is_terminal(1);
  progress_options.log_every = config.log_every;
  progress_options.count_tokens = w.objective->unit() == engine::LossUnit::kToken;
  metrics::ProgressPrinter progress(out, progress_options);
  trainer.add_sink(&metrics_file);
  trainer.add_sink(&progress);
  const engine::TrainSummary summary = trainer.fit();

  std::string sample;
  if (w.gpt && config.sample.max_new_bytes() > 0) {
    const nn::AutocastGuard autocast(config.precision, torch::kCPU);
    sample = models::generate_text(w.gpt, config.prompt, config.sample);
    out << "\nsample (temperature " << config.sample.temperature() << ", top-k "
        << config.sample.top_k() << "):\n"
        << sample << "\n";
  }
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
