#include "bigbatch/cli/train_command.h"

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/cli/run_dir.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/context_dataset.h"
#include "bigbatch/data/sequence_dataset.h"
#include "bigbatch/engine/micro_batch_search.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/memory/tracker.h"
#include "bigbatch/metrics/jsonl_sink.h"
#include "bigbatch/metrics/progress.h"
#include "bigbatch/models/model_info.h"

namespace bigbatch::cli {

namespace {

TrainConfig load_config(const TrainCommandOptions& options) {
  ConfigReader reader =
      options.config_path.empty() ? ConfigReader() : ConfigReader::from_file(options.config_path);
  for (const std::string& assignment : options.overrides)
    reader.set_override(assignment);
  return read_train_config(reader);
}

/// The model, its datasets and its objective, built from the config.
struct Workload {
  std::shared_ptr<torch::nn::Module> module;
  models::Gpt gpt{nullptr};  ///< set for the GPT (for sampling)
  std::unique_ptr<data::Dataset> train;
  std::unique_ptr<data::Dataset> val;
  std::unique_ptr<engine::Objective> objective;
};

Workload build_workload(const TrainConfig& config, const data::TextCorpus& corpus) {
  Workload w;
  const auto dtype = config.float64 ? torch::kFloat64 : torch::kFloat32;
  if (config.model == ModelKind::kGpt) {
    w.gpt = models::Gpt(config.gpt);
    w.gpt->to(dtype);
    w.module = w.gpt.ptr();
    const auto options = data::SequenceDatasetOptions(config.gpt.context());
    w.train = std::make_unique<data::SequenceDataset>(
        corpus.train_shared(), data::SequenceDatasetOptions(options).name("train"));
    if (corpus.val().size() >= 2) {  // one input byte and its target
      w.val = std::make_unique<data::SequenceDataset>(
          corpus.val_shared(), data::SequenceDatasetOptions(options).name("validation"));
    }
    w.objective = std::make_unique<engine::CrossEntropyObjective>(
        engine::forward_of(w.gpt), engine::LossUnit::kToken, options.ignore_index());
  } else {
    models::Mlp mlp(config.mlp);
    mlp->to(dtype);
    w.module = mlp.ptr();
    const auto options = data::ContextDatasetOptions(config.mlp.context());
    w.train = std::make_unique<data::ContextDataset>(
        corpus.train_shared(), data::ContextDatasetOptions(options).name("train"));
    if (corpus.val().size() > static_cast<size_t>(config.mlp.context())) {
      w.val = std::make_unique<data::ContextDataset>(
          corpus.val_shared(), data::ContextDatasetOptions(options).name("validation"));
    }
    w.objective = std::make_unique<engine::CrossEntropyObjective>(engine::forward_of(mlp),
                                                                  engine::LossUnit::kSample);
  }
  return w;
}

/// What the plan table shows.
struct PlanView {
  const TrainConfig& config;
  const engine::Plan& plan;
  const Workload& w;
  const data::TextCorpus& corpus;
  int64_t steps = 0;
  int64_t windows_per_epoch = 0;
  std::string micro_batch_search;  ///< how "auto" chose, or empty
  std::string run_dir;             ///< empty when nothing is written
};

Table plan_table(const PlanView& view) {
  const TrainConfig& config = view.config;
  const engine::Plan& plan = view.plan;
  const Workload& w = view.w;
  const int64_t steps = view.steps;
  const int64_t windows_per_epoch = view.windows_per_epoch;
  Table table("bigbatch plan");
  table.section("model");
  if (config.model == ModelKind::kGpt) {
    table.add("model", "gpt",
              cat(config.gpt.layers(), " layers, ", config.gpt.heads(), " heads, width ",
                  config.gpt.embed(), ", context ", config.gpt.context(), " bytes"));
  } else {
    table.add("model", "mlp",
              cat(config.mlp.layers(), " hidden layers of ", config.mlp.hidden(), ", context ",
                  config.mlp.context(), " bytes"));
  }
  table.add("parameters", human_count(static_cast<double>(models::parameter_count(*w.module))),
            config.float64 ? "float64" : "float32");
  if (config.model == ModelKind::kGpt) {
    table.add("checkpointing", config.checkpointing.to_string(),
              config.checkpointing.mode == nn::CheckpointMode::kNone
                  ? "activations kept for backward"
                  : "recomputed in backward: less memory, more time");
  }
  table.section("data");
  table.add("corpus", view.corpus.describe());
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
  table.add("loss", w.objective->unit() == engine::LossUnit::kToken ? "per token" : "per sample",
            "mean over the whole window");
  table.section("run");
  table.add(
      "steps", std::to_string(steps),
      cat(windows_per_epoch, " windows per epoch (",
          format_fixed(static_cast<double>(steps) / static_cast<double>(windows_per_epoch), 2),
          " epochs)"));
  table.add("threads", std::to_string(torch::get_num_threads()), "intra-op (OpenMP)");
  table.add("run_dir", view.run_dir.empty() ? "(not written)" : view.run_dir);
  return table;
}

/// Runs the micro-batch search with forward + backward trials on the first training samples,
/// leaving the model, its gradients and the random generators as they were.
engine::MicroBatchSearchResult search_micro_batch(const TrainConfig& config, const Workload& w,
                                                  int64_t global_batch) {
  const RngState rng = RngState::capture(torch::kCPU);
  const bool was_training = w.module->is_training();
  w.module->train(true);
  auto trial = [&](int64_t micro_batch) {
    std::vector<int64_t> indices(static_cast<size_t>(micro_batch));
    std::iota(indices.begin(), indices.end(), 0);
    const data::Batch batch = w.train->get(indices);
    w.objective->loss_sum(batch).backward();
    for (torch::Tensor& parameter : w.module->parameters())
      parameter.mutable_grad().reset();
  };
  int64_t parameter_bytes = 0;
  for (const torch::Tensor& parameter : w.module->parameters()) {
    parameter_bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
  }
  // Optimizer state that exists from the first step on: two moments (AdamW) or momentum (SGD).
  const int64_t state_bytes = config.optim.kind() == engine::OptimizerKind::kAdamW
                                  ? 2 * parameter_bytes
                              : config.optim.momentum() > 0 ? parameter_bytes
                                                            : 0;
  engine::MicroBatchSearchResult found =
      engine::find_micro_batch(trial, engine::MicroBatchSearchOptions()
                                          .global_batch(global_batch)
                                          .budget_bytes(config.memory_budget)
                                          .reserved_bytes(state_bytes));
  w.module->train(was_training);
  rng.restore();
  return found;
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
      {"samples", s.samples},
      {"tokens", s.tokens},
      {"seconds", s.seconds},
      {"train_seconds", s.train_seconds},
      {"tokens_per_second", tokens_per_second},
      {"peak_bytes", s.peak_bytes},
      {"final_micro_batch", s.final_micro_batch},
      {"sample", sample}};
  io::write_file_atomically(
      run_dir + "/summary.json",
      summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace

int run_train(const TrainCommandOptions& options, std::ostream& out) {
  // Everything the user supplied is checked before anything is written.
  const TrainConfig config = load_config(options);
  if (config.threads > 0)
    torch::set_num_threads(static_cast<int>(config.threads));
  memory::MemoryTracker& tracker = memory::MemoryTracker::instance();
  tracker.install();  // before any tensor exists, so that every byte is counted
  torch::manual_seed(config.seed);
  const data::TextCorpus corpus = data::TextCorpus::load(config.data);
  Workload w = build_workload(config, corpus);
  if (w.gpt)
    w.gpt->set_checkpointing(config.checkpointing);
  engine::BatchOptions batch = config.batch;
  if (config.auto_micro_batch)
    batch.micro_batch(batch.global_batch());  // validated, then chosen
  engine::Plan plan = engine::resolve_plan(batch);
  BB_CHECK_INPUT(w.train->size() >= plan.global_batch, "the training split holds ", w.train->size(),
                 " samples, fewer than batch.global_batch = ", plan.global_batch,
                 "; use a larger corpus (data.path) or a smaller global batch");
  const int64_t windows_per_epoch =
      engine::WindowSampler(w.train->size(), plan.global_batch, config.seed).windows_per_epoch();
  const int64_t steps = config.epochs > 0 ? config.epochs * windows_per_epoch : config.steps;
  const engine::LrSchedule schedule(
      engine::LrScheduleOptions(config.schedule).peak_lr(plan.lr).total_steps(steps));
  tracker.set_budget(config.memory_budget);
  std::string micro_batch_search;
  if (config.auto_micro_batch) {
    const engine::MicroBatchSearchResult found = search_micro_batch(config, w, plan.global_batch);
    // As many passes as the largest fitting size needs, with micro-batches as even as possible:
    // 64 with room for 21 runs as 4 x 16, not 3 x 21 + 1.
    const int64_t passes = (plan.global_batch + found.micro_batch - 1) / found.micro_batch;
    plan = engine::resolve_plan(batch.micro_batch((plan.global_batch + passes - 1) / passes));
    micro_batch_search = found.describe();
  }
  auto optimizer =
      engine::make_optimizer(*w.module, engine::OptimizerOptions(config.optim).lr(plan.lr));
  const engine::TrainerOptions trainer_options = engine::TrainerOptions()
                                                     .total_steps(steps)
                                                     .eval_every(config.eval_every)
                                                     .eval_samples(config.eval_samples)
                                                     .seed(config.seed)
                                                     .max_grad_norm(config.max_grad_norm);
  engine::TrainingSetup setup;
  setup.model = w.module.get();
  setup.objective = w.objective.get();
  setup.optimizer = optimizer.get();
  setup.schedule = &schedule;
  setup.plan = &plan;
  setup.train_data = w.train.get();
  setup.val_data = w.val.get();
  engine::Trainer trainer(setup, trainer_options);

  if (options.plan_only) {
    out << plan_table({config, plan, w, corpus, steps, windows_per_epoch, micro_batch_search, ""})
               .render();
    return 0;
  }
  const std::string run_dir = create_run_dir(config.run_dir, to_string(config.model));
  const Table table =
      plan_table({config, plan, w, corpus, steps, windows_per_epoch, micro_batch_search, run_dir});
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
    sample = models::generate_text(w.gpt, config.prompt, config.sample);
    out << "\nsample (temperature " << config.sample.temperature() << ", top-k "
        << config.sample.top_k() << "):\n"
        << sample << "\n";
  }
  write_summary(run_dir, summary, sample);
  out << "\nfinished " << summary.steps << " steps in " << human_duration(summary.seconds)
      << ": train loss " << summary.last_train_loss << ", val loss " << summary.first_val_loss
      << " -> " << summary.last_val_loss << "\nrun directory: " << run_dir << "\n";
  return 0;
}

int run_config(const TrainCommandOptions& options, std::ostream& out) {
  out << load_config(options).resolved_toml;
  return 0;
}

}  // namespace bigbatch::cli
