#include "bigbatch/cli/bench_precision_command.h"

#include <cstdio>
#include <map>

#include "bigbatch/cli/train_command.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/grid.h"
#include "bigbatch/engine/gradient_error.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/job/builtin_workload.h"
#include "bigbatch/job/training_parts.h"

namespace bigbatch::cli {
namespace {

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", value);
  return text;
}

std::vector<int64_t> default_accum_steps(int64_t global_batch) {
  std::vector<int64_t> steps;
  for (int64_t k = 1; k <= global_batch; k *= 2) {
    if (global_batch % k == 0)
      steps.push_back(k);
  }
  return steps;
}

}  // namespace

int run_bench_precision(const BenchPrecisionOptions& options, std::ostream& out) {
  TrainConfig config = load_config(options.config);
  BB_CHECK_INPUT(!config.model.float64,
                 "bench precision compares float32 training with a float64 reference; leave "
                 "model.dtype = \"float32\"");
  config.job.precision = nn::Precision::kFp32;  // the objective stays plain; the bench autocasts
  const ThreadSettings threads = job::apply_thread_options(config.job);
  torch::manual_seed(config.job.trainer.seed());
  const job::LoadedData data = job::load_builtin_data(config.model.kind, config.data);
  job::Workload w = job::build_builtin_workload(config.model, data, pass_site_of(config));
  const int64_t global_batch = config.job.batch.global_batch();
  BB_CHECK_INPUT(w.train->size() >= global_batch, "the training split holds ", w.train->size(),
                 " samples, fewer than batch.global_batch = ", global_batch);
  const engine::Window window =
      engine::WindowSampler(w.train->size(), global_batch, config.job.trainer.seed()).next();
  const data::Batch batch = w.train->get(window.indices);

  const auto errors = engine::window_gradient_errors(
      *w.module, *w.objective, batch,
      engine::GradientErrorOptions().accum_steps(
          options.accum_steps.empty() ? default_accum_steps(global_batch) : options.accum_steps));
  std::map<int64_t, std::map<nn::Precision, double>> table;
  for (const engine::GradientError& error : errors)
    table[error.accum_steps][error.precision] = error.relative_error;
  std::vector<std::vector<std::string>> rows;
  for (const auto& [steps, by_precision] : table) {
    rows.push_back({std::to_string(steps), std::to_string(global_batch / steps),
                    scientific(by_precision.at(nn::Precision::kFp32)),
                    scientific(by_precision.at(nn::Precision::kBf16))});
  }
  out << render_grid(cat("window gradient error vs float64 (", models::to_string(config.model.kind),
                         ", global batch ", global_batch, ", threads: ", threads.describe(), ")"),
                     {"accum_steps", "micro_batch", "fp32", "bf16"}, rows)
      << "relative L2 error ||g - g_ref|| / ||g_ref|| of the window gradient; accumulation in "
         "float32 .grad, forward passes autocast to bf16 in the bf16 column\n";
  return 0;
}

}  // namespace bigbatch::cli
