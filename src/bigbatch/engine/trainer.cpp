#include "bigbatch/engine/trainer.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "bigbatch/core/check.h"
#include "bigbatch/engine/window_sampler.h"

namespace bigbatch::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Restores a module's train/eval mode when it goes out of scope.
class ModeGuard {
 public:
  ModeGuard(torch::nn::Module& module, bool train) : module_(module), was_(module.is_training()) {
    module_.train(train);
  }
  ~ModeGuard() { module_.train(was_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_;
};

}  // namespace

Trainer::Trainer(const TrainingSetup& setup, TrainerOptions options)
    : setup_(setup), options_(options) {
  BB_CHECK(setup.model && setup.objective && setup.optimizer && setup.schedule && setup.plan &&
               setup.train_data,
           "TrainingSetup is missing a part");
  BB_CHECK_INPUT(options.total_steps() > 0, "train.steps = ", options.total_steps(),
                 " must be positive");
  BB_CHECK_INPUT(options.eval_every() >= 0, "train.eval_every = ", options.eval_every(),
                 " must be >= 0");
  BB_CHECK_INPUT(options.eval_samples() >= 0, "train.eval_samples = ", options.eval_samples(),
                 " must be >= 0");
}

TrainSummary Trainer::fit() {
  const Plan& plan = *setup_.plan;
  torch::nn::Module& model = *setup_.model;
  Objective& objective = *setup_.objective;
  GradientAccumulator accumulator(
      model.parameters(), *setup_.optimizer, setup_.schedule,
      AccumulatorOptions().unit(objective.unit()).max_grad_norm(options_.max_grad_norm()));
  WindowSampler sampler(setup_.train_data->size(), plan.global_batch, options_.seed());

  TrainSummary summary;
  summary.first_val_loss = summary.last_val_loss = std::numeric_limits<double>::quiet_NaN();
  const auto start = Clock::now();
  const bool has_val = setup_.val_data != nullptr && setup_.val_data->size() > 0;
  if (has_val && options_.eval_every() > 0) {
    const metrics::EvalRecord first = evaluate();
    summary.first_val_loss = first.loss;
    report_eval(first);
  }

  ModeGuard training(model, true);
  while (accumulator.steps_taken() < options_.total_steps()) {
    const auto window_start = Clock::now();
    // 1. Take a window and cut it into micro-batches.
    const Window window = sampler.next();
    std::vector<data::Batch> micro_batches;
    std::vector<Counts> micro_counts;
    Counts window_counts;
    int64_t offset = 0;
    for (const int64_t size : plan.split_window(static_cast<int64_t>(window.indices.size()))) {
      const std::vector<int64_t> part(window.indices.begin() + offset,
                                      window.indices.begin() + offset + size);
      offset += size;
      micro_batches.push_back(setup_.train_data->get(part));
      micro_counts.push_back(objective.count(micro_batches.back()));
      window_counts += micro_counts.back();
    }
    // 2. Forward and backward each micro-batch, normalised by the whole window.
    accumulator.begin_window(window_counts);
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      accumulator.backward(objective.loss_sum(micro_batches[i]), micro_counts[i]);
    }
    // 3. Boundary: clip, schedule, step, zero.
    const WindowResult result = accumulator.step();
    // 4. Observe.
    const double step_seconds = seconds_since(window_start);
    summary.train_seconds += step_seconds;
    summary.steps = steps_taken_ = result.step;
    summary.epochs_started = window.epoch + 1;
    summary.last_train_loss = result.mean_loss;
    summary.samples += result.counts.samples;
    summary.tokens += result.counts.tokens;
    metrics::WindowRecord record;
    record.step = result.step;
    record.total_steps = options_.total_steps();
    record.epoch = window.epoch;
    record.loss = result.mean_loss;
    record.lr = result.lr;
    record.grad_norm = result.grad_norm;
    record.clipped = result.clipped;
    record.samples = result.counts.samples;
    record.tokens = result.counts.tokens;
    record.micro_batches = result.micro_batches;
    record.step_seconds = step_seconds;
    record.elapsed_seconds = seconds_since(start);
    record.samples_per_second = static_cast<double>(result.counts.samples) / step_seconds;
    record.tokens_per_second = static_cast<double>(result.counts.tokens) / step_seconds;
    for (metrics::MetricsSink* sink : sinks_)
      sink->on_window(record);

    const bool last = result.step == options_.total_steps();
    const bool due = options_.eval_every() > 0 && result.step % options_.eval_every() == 0;
    if (has_val && (last || due)) {
      const metrics::EvalRecord eval = evaluate();
      summary.last_val_loss = eval.loss;
      report_eval(eval);
    }
  }
  summary.seconds = seconds_since(start);
  for (metrics::MetricsSink* sink : sinks_)
    sink->on_finish();
  return summary;
}

metrics::EvalRecord Trainer::evaluate() {
  BB_CHECK(setup_.val_data != nullptr, "evaluate() without validation data");
  const auto start = Clock::now();
  torch::NoGradGuard no_grad;
  ModeGuard eval_mode(*setup_.model, false);
  const data::Dataset& val = *setup_.val_data;
  const int64_t available = val.size();
  const int64_t count =
      options_.eval_samples() > 0 ? std::min(options_.eval_samples(), available) : available;
  double loss_sum = 0.0;
  Counts total;
  for (int64_t begin = 0; begin < count; begin += setup_.plan->micro_batch) {
    std::vector<int64_t> indices(std::min(setup_.plan->micro_batch, count - begin));
    std::iota(indices.begin(), indices.end(), begin);
    const data::Batch batch = val.get(indices);
    total += setup_.objective->count(batch);
    loss_sum += setup_.objective->loss_sum(batch).item<double>();
  }
  metrics::EvalRecord record;
  record.step = steps_taken_;
  record.loss =
      loss_sum / static_cast<double>(std::max<int64_t>(1, total.units(setup_.objective->unit())));
  record.samples = total.samples;
  record.tokens = total.tokens;
  record.seconds = seconds_since(start);
  return record;
}

void Trainer::report_eval(metrics::EvalRecord record) {
  for (metrics::MetricsSink* sink : sinks_)
    sink->on_eval(record);
}

}  // namespace bigbatch::engine
