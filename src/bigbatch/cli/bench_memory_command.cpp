#include "bigbatch/cli/bench_memory_command.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "bigbatch/cli/train_command.h"
#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/grid.h"
#include "bigbatch/core/table.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/job/builtin_workload.h"
#include "bigbatch/job/hf_workload.h"
#include "bigbatch/job/micro_batch_trial.h"
#include "bigbatch/job/run_directory.h"
#include "bigbatch/job/training_parts.h"
#include "bigbatch/memory/breakdown.h"
#include "bigbatch/memory/device_memory.h"
#include "bigbatch/memory/tracker.h"
#include "bigbatch/metrics/sink.h"
#include "bigbatch/metrics/svg_chart.h"
#include "bigbatch/models/hf_model.h"

namespace bigbatch::cli {

namespace {

/// Keeps every window record of a run.
class RecordingSink : public metrics::MetricsSink {
 public:
  void on_window(const metrics::WindowRecord& record) override { windows.push_back(record); }
  void on_eval(const metrics::EvalRecord&) override {}
  std::vector<metrics::WindowRecord> windows;
};

/// One measured (checkpointing, micro-batch) pair.
struct Point {
  std::string policy;
  int64_t micro_batch = 0;
  int64_t accum_steps = 0;
  bool fits = true;                ///< false: ran out of memory.budget
  memory::MemoryBreakdown memory;  ///< peak above the usage before the model was built
  double step_seconds = NAN;       ///< median over the timed steps
  double units_per_second = NAN;   ///< tokens (GPT) or samples (MLP) per second, timed steps
};

/// How micro_batch = "auto" did against trying every size, for one policy.
struct AutoCheck {
  std::string policy;
  engine::MicroBatchSearchResult found;
  int64_t auto_micro_batch = 0;  ///< the micro-batch training runs with (evened out)
  bool auto_plan_trains = false;
  int64_t largest_fitting = 0;  ///< the largest micro-batch that trained (0: none)
  int64_t sizes_tried = 0;
  std::string error;  ///< why the search found nothing (even 1 sample over the budget)
};

struct BenchSetup {
  TrainConfig config;
  const job::LoadedData& data;
  int64_t baseline_bytes = 0;  ///< the device's tensor memory in use before any model is built
  int64_t steps = 0;           ///< timed steps per point
};

/// The configured model (built-in or model.kind = "hf") from the seed, on the configured device,
/// its loss under the configured precision.
job::Workload configured_workload(const TrainConfig& config, const job::LoadedData& data) {
  torch::manual_seed(config.job.trainer.seed());
  job::Workload w = config.hf
                        ? job::build_hf_workload(*config.hf)
                        : job::build_builtin_workload(config.model, data, pass_site_of(config));
  job::place_workload(w, config.job);
  return w;
}

/// The checkpointing of the configured model: the built-in model's or the pretrained one's.
void set_checkpointing(TrainConfig& config, const std::string& policy) {
  config.model.checkpointing = nn::parse_checkpoint_policy(policy, "--checkpointing");
  if (config.hf)
    config.hf->checkpointing = config.model.checkpointing;
}

double median(std::vector<double> values) {
  if (values.empty())
    return NAN;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

/// Trains warm-up + `timed_steps` optimizer steps from the seed at this micro-batch and policy.
Point measure(const BenchSetup& bench, const std::string& policy, int64_t micro_batch,
              int64_t timed_steps) {
  TrainConfig config = bench.config;
  set_checkpointing(config, policy);
  Point point;
  point.policy = policy;
  point.micro_batch = micro_batch;
  job::Workload w = configured_workload(config, bench.data);
  w.val.reset();  // no evaluation: only training steps are measured
  const engine::Plan plan = engine::resolve_plan(
      engine::BatchOptions(config.job.batch).micro_batch(micro_batch).accum_steps(0));
  point.accum_steps = plan.accum_steps;
  job::TrainingParts parts = job::make_training_parts(config.job, w, plan, timed_steps + 1);
  // Synchronous gathering: batches prefetched for the next window would land in this window's
  // peak at a moment that depends on thread timing.
  parts.trainer.eval_every(0).retry_on_oom(false).prefetch_depth(0);
  engine::Trainer trainer(job::training_setup(w, parts, plan), parts.trainer);
  RecordingSink records;
  trainer.add_sink(&records);
  try {
    trainer.fit();
  } catch (const c10::OutOfMemoryError&) {
    memory::release_cached_memory(config.job.device);
    point.fits = false;
    return point;
  }
  int64_t peak = 0;
  std::vector<double> step_seconds;
  double units = 0;
  double seconds = 0;
  for (size_t i = 0; i < records.windows.size(); ++i) {
    const metrics::WindowRecord& record = records.windows[i];
    peak = std::max(peak, record.peak_bytes - bench.baseline_bytes);
    if (i == 0)
      continue;  // warm-up: first allocations, optimizer state created
    step_seconds.push_back(record.step_seconds);
    units += static_cast<double>(record.tokens);
    seconds += record.step_seconds;
  }
  point.memory = memory::breakdown(*w.module, parts.optimizer.get(), peak);
  point.step_seconds = median(step_seconds);
  point.units_per_second = units / seconds;
  return point;
}

/// Runs the auto search for `policy`, then tries micro-batches downwards from `first_to_try`
/// until one trains: the largest that fits, found by trying every size above it.
AutoCheck check_auto(const BenchSetup& bench, const std::string& policy, int64_t first_to_try,
                     std::ostream& out) {
  AutoCheck check;
  check.policy = policy;
  {
    TrainConfig config = bench.config;
    set_checkpointing(config, policy);
    const job::Workload w = configured_workload(config, bench.data);
    try {
      check.found = job::search_micro_batch(
          w, job::MicroBatchTrialOptions()
                 .global_batch(config.job.batch.global_batch())
                 .budget_bytes(config.job.memory_budget)
                 .reserved_bytes(job::optimizer_state_bytes(config.job.optimizer, *w.module))
                 .concurrent_micro_batches(config.job.trainer.concurrent_micro_batches()));
    } catch (const InputError& error) {
      check.error = error.what();
    }
  }
  if (check.error.empty()) {
    check.auto_micro_batch =
        job::even_plan(bench.config.job.batch, check.found.micro_batch).micro_batch;
    check.auto_plan_trains = measure(bench, policy, check.auto_micro_batch, 1).fits;
  }
  for (int64_t size = first_to_try; size >= 1; --size) {
    ++check.sizes_tried;
    if (measure(bench, policy, size, 1).fits) {
      check.largest_fitting = size;
      break;
    }
  }
  out << "  " << policy << ": "
      << (check.error.empty()
              ? cat("auto ", check.found.micro_batch, " (trains as ", check.auto_micro_batch, ")")
              : "auto: " + check.error)
      << ", largest that trains " << check.largest_fitting << "\n"
      << std::flush;
  return check;
}

std::string unit_name(const TrainConfig& config) {
  if (config.hf) {
    return models::hf_task_of(models::read_hf_model_type(config.hf->model_path)) ==
                   models::HfTask::kCausalLm
               ? "tokens"
               : "samples";
  }
  return config.model.kind == models::ModelKind::kGpt ? "tokens" : "samples";
}

/// "gpt", ..., or "hf" for a pretrained model.
std::string model_name(const TrainConfig& config) {
  return config.hf ? "hf" : models::to_string(config.model.kind);
}

std::vector<int64_t> default_micro_batches(int64_t global_batch) {
  std::vector<int64_t> sizes;
  for (int64_t size = 1; size < global_batch; size *= 2)
    sizes.push_back(size);
  sizes.push_back(global_batch);
  return sizes;
}

/// Validates and completes the sweep settings; throws InputError for bad input.
void complete_options(BenchMemoryOptions& options, const TrainConfig& config) {
  const int64_t global = config.job.batch.global_batch();
  BB_CHECK_INPUT(options.steps >= 1, "--steps = ", options.steps, " must be at least 1");
  if (options.micro_batches.empty())
    options.micro_batches = default_micro_batches(global);
  for (const int64_t size : options.micro_batches) {
    BB_CHECK_INPUT(size >= 1 && size <= global, "--micro-batches holds ", size,
                   "; every size must be between 1 and batch.global_batch = ", global);
  }
  std::sort(options.micro_batches.begin(), options.micro_batches.end());
  options.micro_batches.erase(
      std::unique(options.micro_batches.begin(), options.micro_batches.end()),
      options.micro_batches.end());
  if (options.checkpointing.empty()) {
    options.checkpointing = {"none"};
    if (config.hf || config.model.kind != models::ModelKind::kMlp)
      options.checkpointing.push_back("blocks");
  }
  for (const std::string& policy : options.checkpointing) {
    const nn::CheckpointPolicy parsed = nn::parse_checkpoint_policy(policy, "--checkpointing");
    BB_CHECK_INPUT(config.hf || config.model.kind != models::ModelKind::kMlp ||
                       parsed.mode == nn::CheckpointMode::kNone,
                   "--checkpointing ", policy,
                   " needs a block model (model.kind = \"gpt\"); the MLP has no blocks to "
                   "checkpoint: use --checkpointing none");
  }
}

const Point* find_point(const std::vector<Point>& points, const std::string& policy,
                        int64_t micro_batch) {
  for (const Point& point : points) {
    if (point.policy == policy && point.micro_batch == micro_batch)
      return &point;
  }
  return nullptr;
}

std::string render_table(const std::vector<Point>& points, const TrainConfig& config) {
  const int64_t global = config.job.batch.global_batch();
  std::vector<std::vector<std::string>> rows;
  for (const Point& p : points) {
    std::vector<std::string> row = {p.policy, std::to_string(p.micro_batch),
                                    cat(p.accum_steps, " x ", p.micro_batch)};
    if (!p.fits) {
      row.push_back("out of memory");
      rows.push_back(row);
      continue;
    }
    const Point* full = find_point(points, p.policy, global);
    const Point* plain = find_point(points, "none", p.micro_batch);
    const bool compare_full = full != nullptr && full->fits;
    const bool compare_plain = p.policy != "none" && plain != nullptr && plain->fits;
    row.push_back(format_bytes(p.memory.peak));
    row.push_back(format_bytes(p.memory.activations));
    row.push_back(compare_full ? format_fixed(100.0 * static_cast<double>(p.memory.peak) /
                                                  static_cast<double>(full->memory.peak),
                                              1) +
                                     "%"
                               : "-");
    row.push_back(format_fixed(p.step_seconds, 3));
    row.push_back(human_count(p.units_per_second));
    row.push_back(compare_plain && p.memory.activations > 0
                      ? format_fixed(static_cast<double>(plain->memory.activations) /
                                         static_cast<double>(p.memory.activations),
                                     2) +
                            "x"
                      : "-");
    row.push_back(compare_plain ? format_fixed(p.step_seconds / plain->step_seconds, 2) + "x"
                                : "-");
    rows.push_back(row);
  }
  return render_grid(
      cat("bigbatch bench memory: global batch ", global, ", peak tensor memory per step on ",
          describe_device(config.job.device)),
      {"checkpointing", "micro-batch", "plan", "peak", "activations", "of full batch", "s/step",
       unit_name(config) + "/s", "activations cut", "time cost"},
      rows);
}

/// Forward/backward passes per window at this micro-batch.
int64_t passes(int64_t global_batch, int64_t micro_batch) {
  return (global_batch + micro_batch - 1) / micro_batch;
}

std::string render_auto_checks(const std::vector<AutoCheck>& checks, int64_t budget,
                               int64_t global_batch) {
  std::vector<std::vector<std::string>> rows;
  for (const AutoCheck& c : checks) {
    if (!c.error.empty()) {
      rows.push_back({c.policy, "none fits"});
      continue;
    }
    rows.push_back(
        {c.policy, std::to_string(c.found.micro_batch), std::to_string(c.auto_micro_batch),
         c.auto_plan_trains ? "yes" : "NO", std::to_string(c.found.out_of_memory_trials),
         c.largest_fitting > 0 ? std::to_string(c.largest_fitting) : "none",
         c.largest_fitting > 0 ? format_fixed(100.0 * static_cast<double>(c.found.micro_batch) /
                                                  static_cast<double>(c.largest_fitting),
                                              1) +
                                     "%"
                               : "-",
         c.largest_fitting > 0 ? cat(passes(global_batch, c.auto_micro_batch), " / ",
                                     passes(global_batch, c.largest_fitting))
                               : "-",
         std::to_string(c.sizes_tried)});
  }
  return render_grid(
      cat("micro_batch = \"auto\" under memory.budget = ", format_bytes(budget),
          " against trying sizes one by one"),
      {"checkpointing", "auto found", "trains as", "trains", "OOM trials", "largest that trains",
       "auto / largest", "passes auto / largest", "sizes tried"},
      rows);
}

std::string render_chart(const std::vector<Point>& points, const BenchMemoryOptions& options,
                         const TrainConfig& config) {
  metrics::ChartPanel memory_panel{"Peak tensor memory", "micro-batch (samples)", "MiB", true, {}};
  metrics::ChartPanel speed_panel{
      "Throughput", "micro-batch (samples)", unit_name(config) + " per second", true, {}};
  for (const std::string& policy : options.checkpointing) {
    metrics::Series memory_series{"checkpointing " + policy, {}, {}};
    metrics::Series speed_series = memory_series;
    for (const Point& p : points) {
      if (p.policy != policy)
        continue;
      const double x = static_cast<double>(p.micro_batch);
      memory_series.xs.push_back(x);
      memory_series.ys.push_back(p.fits ? static_cast<double>(p.memory.peak) / (1024.0 * 1024.0)
                                        : NAN);
      speed_series.xs.push_back(x);
      speed_series.ys.push_back(p.fits ? p.units_per_second : NAN);
    }
    memory_panel.series.push_back(memory_series);
    speed_panel.series.push_back(speed_series);
  }
  return metrics::render_svg({memory_panel, speed_panel},
                             cat("bigbatch bench memory: ", model_name(config), ", global batch ",
                                 config.job.batch.global_batch()));
}

nlohmann::json to_json(const Point& p) {
  nlohmann::json j = {{"checkpointing", p.policy},
                      {"micro_batch", p.micro_batch},
                      {"accum_steps", p.accum_steps},
                      {"fits", p.fits}};
  if (p.fits) {
    j["peak_bytes"] = p.memory.peak;
    j["parameter_bytes"] = p.memory.parameters;
    j["gradient_bytes"] = p.memory.gradients;
    j["optimizer_state_bytes"] = p.memory.optimizer_state;
    j["activation_bytes"] = p.memory.activations;
    j["step_seconds"] = p.step_seconds;
    j["units_per_second"] = p.units_per_second;
  }
  return j;
}

nlohmann::json to_json(const AutoCheck& c) {
  return {{"checkpointing", c.policy},
          {"auto_micro_batch", c.found.micro_batch},
          {"predicted", c.found.predicted},
          {"bytes_per_sample", c.found.bytes_per_sample},
          {"fixed_bytes", c.found.fixed_bytes},
          {"out_of_memory_trials", c.found.out_of_memory_trials},
          {"trains_as", c.auto_micro_batch},
          {"auto_plan_trains", c.auto_plan_trains},
          {"largest_fitting", c.largest_fitting},
          {"sizes_tried", c.sizes_tried},
          {"error", c.error}};
}

/// Every (checkpointing, micro-batch) point of the sweep, printed as it is measured.
std::vector<Point> sweep(const BenchSetup& bench, const BenchMemoryOptions& options,
                         std::ostream& out) {
  out << "measuring " << options.checkpointing.size() * options.micro_batches.size() << " points, "
      << options.steps << " timed steps each after one warm-up step\n"
      << std::flush;
  std::vector<Point> points;
  for (const std::string& policy : options.checkpointing) {
    for (const int64_t micro_batch : options.micro_batches) {
      points.push_back(measure(bench, policy, micro_batch, options.steps));
      const Point& p = points.back();
      out << "  " << policy << " " << p.accum_steps << " x " << micro_batch << ": "
          << (p.fits ? cat("peak ", format_bytes(p.memory.peak), ", ",
                           format_fixed(p.step_seconds, 3), " s/step")
                     : std::string("out of memory"))
          << "\n"
          << std::flush;
    }
  }
  return points;
}

/// micro_batch = "auto" against trying every size, for each checkpointing policy.
std::vector<AutoCheck> check_auto_for_each_policy(const BenchSetup& bench,
                                                  const BenchMemoryOptions& options,
                                                  const std::vector<Point>& points,
                                                  std::ostream& out) {
  out << "\nchecking micro_batch = \"auto\" under the budget\n" << std::flush;
  std::vector<AutoCheck> checks;
  for (const std::string& policy : options.checkpointing) {
    // Sizes at and above one that already ran out of memory in the sweep are not retried.
    int64_t first_to_try = bench.config.job.batch.global_batch();
    for (const Point& p : points) {
      if (p.policy == policy && !p.fits)
        first_to_try = std::min(first_to_try, p.micro_batch - 1);
    }
    checks.push_back(check_auto(bench, policy, first_to_try, out));
  }
  return checks;
}

}  // namespace

int run_bench_memory(const BenchMemoryOptions& given, std::ostream& out) {
  BenchMemoryOptions options = given;
  TrainConfig config = load_config(options.config);
  complete_options(options, config);
  job::apply_thread_options(config.job);
  const c10::Device device = config.job.device;
  make_current(device);
  memory::MemoryTracker::instance().install();  // the CPU's tensor memory (a GPU's is counted)
  // A pretrained model (model.kind = "hf") reads its data in its workload.
  const job::LoadedData data =
      config.hf ? job::LoadedData() : job::load_builtin_data(config.model.kind, config.data);
  {
    const job::Workload w = configured_workload(config, data);
    BB_CHECK_INPUT(w.train->size() >= config.job.batch.global_batch(), "the training split holds ",
                   w.train->size(),
                   " samples, fewer than batch.global_batch = ", config.job.batch.global_batch(),
                   "; use more data or a smaller global batch");
  }
  const std::string out_dir = job::create_run_dir(options.out_dir, "bench-memory");
  io::write_file_atomically(out_dir + "/config.toml", config.resolved_toml);
  BenchSetup bench{config, data, memory::current_bytes(device), options.steps};
  memory::set_budget_bytes(device, config.job.memory_budget);

  const std::vector<Point> points = sweep(bench, options, out);
  const std::string table = render_table(points, config);
  out << "\n" << table;

  std::vector<AutoCheck> checks;
  std::string auto_table;
  if (config.job.memory_budget > 0) {
    checks = check_auto_for_each_policy(bench, options, points, out);
    auto_table =
        render_auto_checks(checks, config.job.memory_budget, config.job.batch.global_batch());
    out << "\n" << auto_table;
  }
  memory::set_budget_bytes(device, 0);

  nlohmann::json report = {{"model", model_name(config)},
                           {"device", config.job.device.str()},
                           {"global_batch", config.job.batch.global_batch()},
                           {"memory_budget", config.job.memory_budget},
                           {"timed_steps", options.steps},
                           {"unit", unit_name(config)},
                           {"points", nlohmann::json::array()},
                           {"auto", nlohmann::json::array()}};
  for (const Point& p : points)
    report["points"].push_back(to_json(p));
  for (const AutoCheck& c : checks)
    report["auto"].push_back(to_json(c));
  io::write_file_atomically(out_dir + "/bench.json", report.dump(2) + "\n");
  io::write_file_atomically(out_dir + "/table.txt", table + auto_table);
  io::write_file_atomically(out_dir + "/memory.svg", render_chart(points, options, config));
  out << "\nwritten: " << out_dir << "/{table.txt,bench.json,memory.svg,config.toml}\n";
  return 0;
}

}  // namespace bigbatch::cli
