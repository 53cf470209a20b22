// A whole training run of a small MLP with injected faults, recorded in full, and a bitwise
// comparison of two such runs: shared by the tests of execution options that must not change
// results (prefetching, concurrent micro-batches).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bigbatch/data/context_dataset.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/mlp.h"
#include "engine/training_helpers.h"
#include "support/test_support.h"

namespace bigbatch::testing {

/// Delegates to another dataset, records the threads get() ran on, and throws
/// c10::OutOfMemoryError (as the tracker's budget would) on get() call number `fail_at`
/// (1-based; 0: never), once.
class GatherProbe : public data::Dataset {
 public:
  GatherProbe(const data::Dataset& inner, int64_t fail_at) : inner_(inner), fail_at_(fail_at) {}
  int64_t size() const override { return inner_.size(); }
  data::Batch get(const std::vector<int64_t>& indices) const override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      threads_.insert(std::this_thread::get_id());
    }
    if (++calls_ == fail_at_)
      C10_THROW_ERROR(OutOfMemoryError, "injected: out of memory while gathering");
    return inner_.get(indices);
  }
  std::string describe() const override { return inner_.describe(); }
  /// get() calls so far.
  int64_t calls() const { return calls_.load(); }
  /// The threads get() ran on.
  std::set<std::thread::id> threads() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }

 private:
  const data::Dataset& inner_;
  int64_t fail_at_;
  mutable std::atomic<int64_t> calls_{0};
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> threads_;
};

/// Delegates to another objective (from several threads at once too); training forward call
/// `oom_at` (1-based; 0: never) throws
/// c10::OutOfMemoryError once, and the losses of the calls in `inf_at` are multiplied by inf.
class Faults : public engine::Objective {
 public:
  Faults(engine::Objective& inner, int64_t oom_at, std::set<int64_t> inf_at)
      : inner_(inner), oom_at_(oom_at), inf_at_(std::move(inf_at)) {}
  engine::LossUnit unit() const override { return inner_.unit(); }
  engine::Counts count(const data::Batch& batch) const override { return inner_.count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override {
    if (!torch::GradMode::is_enabled())
      return inner_.loss_sum(batch);
    const int64_t call = ++calls_;
    if (call == oom_at_)
      C10_THROW_ERROR(OutOfMemoryError, "injected: out of memory in forward");
    const torch::Tensor loss = inner_.loss_sum(batch);
    if (inf_at_.count(call) == 0)
      return loss;
    return loss * torch::full({}, std::numeric_limits<double>::infinity(), loss.options());
  }
  engine::EvalSums evaluate(const data::Batch& batch) override { return inner_.evaluate(batch); }

 private:
  engine::Objective& inner_;
  int64_t oom_at_;
  std::set<int64_t> inf_at_;
  std::atomic<int64_t> calls_{0};  // concurrent micro-batches call from several threads
};

/// What to run: an MLP in float64 (with dropout 0.2 unless told otherwise), global batch 64 as
/// 8 x 8, AdamW with clipping, warmup+cosine over 20 steps (2 epochs of 596 samples), evaluation
/// every 5 steps.
struct RunOptions {
  int64_t prefetch_depth = 0;
  int64_t concurrent_micro_batches = 1;
  double dropout = 0.2;
  int64_t oom_forward_at = 0;
  std::set<int64_t> inf_forward_at;
  int64_t oom_gather_at = 0;
};

struct RunResult {
  torch::Tensor weights;  // all parameters, flattened
  RecordingSink sink;
  RecordingHooks hooks;
  engine::TrainSummary summary;
  int64_t gathers = 0;
  std::set<std::thread::id> gather_threads;
};

inline RunResult train(const RunOptions& run) {
  const data::ContextDataset dataset(random_bytes(600, 3),
                                     data::ContextDatasetOptions(4).name("train"));
  const data::ContextDataset val_data(random_bytes(100, 4),
                                      data::ContextDatasetOptions(4).name("val"));
  const GatherProbe probe(dataset, run.oom_gather_at);
  torch::manual_seed(5);
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32).dropout(run.dropout));
  model->to(torch::kFloat64);
  engine::CrossEntropyObjective plain(engine::forward_of(model), engine::LossUnit::kSample);
  Faults objective(plain, run.oom_forward_at, run.inf_forward_at);
  const engine::Plan plan =
      engine::resolve_plan(engine::BatchOptions().global_batch(64).micro_batch(8).base_lr(3e-3));
  auto optimizer = engine::make_optimizer(
      *model, engine::OptimizerOptions().weight_decay(0.1).beta2(0.99).lr(plan.lr));
  const engine::LrSchedule schedule(
      engine::LrScheduleOptions().peak_lr(plan.lr).warmup_steps(5).total_steps(20));
  engine::TrainingSetup setup = setup_of(*model, objective, *optimizer, schedule, plan, probe);
  setup.val_data = &val_data;
  RunResult result;
  setup.window_hooks = {&result.hooks};
  engine::Trainer trainer(setup, engine::TrainerOptions()
                                     .total_steps(20)
                                     .eval_every(5)
                                     .max_grad_norm(0.5)
                                     .seed(9)
                                     .prefetch_depth(run.prefetch_depth)
                                     .concurrent_micro_batches(run.concurrent_micro_batches));
  trainer.add_sink(&result.sink);
  result.summary = trainer.fit();
  result.weights = flat_parameters(*model);
  result.gathers = probe.calls();
  result.gather_threads = probe.threads();
  return result;
}

/// Bitwise the same run: weights, every window and evaluation record (timings and memory
/// aside), notices, window hooks and the summary.
inline void expect_identical(const RunResult& got, const RunResult& expected,
                             const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(torch::equal(got.weights, expected.weights));
  ASSERT_EQ(got.sink.windows.size(), expected.sink.windows.size());
  for (size_t i = 0; i < expected.sink.windows.size(); ++i) {
    const metrics::WindowRecord& g = got.sink.windows[i];
    const metrics::WindowRecord& e = expected.sink.windows[i];
    EXPECT_EQ(g.step, e.step) << "window " << i;
    EXPECT_EQ(g.epoch, e.epoch) << "window " << i;
    EXPECT_EQ(g.loss, e.loss) << "window " << i;  // exactly, not nearly
    EXPECT_EQ(g.grad_norm, e.grad_norm) << "window " << i;
    EXPECT_EQ(g.lr, e.lr) << "window " << i;
    EXPECT_EQ(g.clipped, e.clipped) << "window " << i;
    EXPECT_EQ(g.samples, e.samples) << "window " << i;
    EXPECT_EQ(g.micro_batch, e.micro_batch) << "window " << i;
    EXPECT_EQ(g.micro_batches, e.micro_batches) << "window " << i;
    EXPECT_EQ(g.skipped, e.skipped) << "window " << i;
    EXPECT_EQ(g.skipped_steps, e.skipped_steps) << "window " << i;
  }
  ASSERT_EQ(got.sink.evals.size(), expected.sink.evals.size());
  for (size_t i = 0; i < expected.sink.evals.size(); ++i) {
    EXPECT_EQ(got.sink.evals[i].step, expected.sink.evals[i].step);
    EXPECT_EQ(got.sink.evals[i].loss, expected.sink.evals[i].loss);
  }
  EXPECT_EQ(got.sink.notices, expected.sink.notices);
  EXPECT_EQ(got.hooks.events, expected.hooks.events);
  EXPECT_EQ(got.summary.steps, expected.summary.steps);
  EXPECT_EQ(got.summary.skipped_steps, expected.summary.skipped_steps);
  EXPECT_EQ(got.summary.samples, expected.summary.samples);
  EXPECT_EQ(got.summary.epochs_started, expected.summary.epochs_started);
  EXPECT_EQ(got.summary.final_micro_batch, expected.summary.final_micro_batch);
  EXPECT_EQ(got.summary.last_train_loss, expected.summary.last_train_loss);
  EXPECT_EQ(got.summary.last_val_loss, expected.summary.last_val_loss);
}

}  // namespace bigbatch::testing
