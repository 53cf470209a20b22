// Whole training runs with non-finite windows: skipped windows are dropped, reported and not
// counted as steps; a real loss-scale overflow backs off until training proceeds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "bigbatch/data/context_dataset.h"
#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/mlp.h"
#include "engine/training_helpers.h"

namespace bigbatch {
namespace {

using testing::RecordingSink;

/// Delegates to another objective but multiplies the loss by inf on the given training forward
/// calls (1-based; evaluation, which runs without gradients, is not counted).
class InfAtCalls : public engine::Objective {
 public:
  InfAtCalls(engine::Objective& inner, std::set<int64_t> calls)
      : inner_(inner), calls_(std::move(calls)) {}
  engine::LossUnit unit() const override { return inner_.unit(); }
  engine::Counts count(const data::Batch& batch) const override { return inner_.count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override {
    const torch::Tensor loss = inner_.loss_sum(batch);
    if (!torch::GradMode::is_enabled() || calls_.count(++count_) == 0)
      return loss;
    return loss * torch::full({}, std::numeric_limits<double>::infinity(), loss.options());
  }
  engine::EvalSums evaluate(const data::Batch& batch) override { return inner_.evaluate(batch); }

 private:
  engine::Objective& inner_;
  std::set<int64_t> calls_;
  int64_t count_ = 0;
};

struct RunResult {
  RecordingSink sink;
  testing::RecordingHooks hooks;
  engine::TrainSummary summary;
};

/// What to run: an MLP of `dtype`, global batch 32 as 4 x 8, AdamW, warmup+cosine over `steps`.
struct RunOptions {
  torch::Dtype dtype = torch::kFloat64;
  int64_t steps = 6;
  std::set<int64_t> inf_calls;
  engine::LossScaler* scaler = nullptr;
  engine::TrainerOptions trainer;
};

engine::LrSchedule schedule_of(int64_t steps) {
  return engine::LrSchedule(
      engine::LrScheduleOptions().peak_lr(3e-3).warmup_steps(2).total_steps(steps));
}

RunResult train(const RunOptions& run) {
  const data::ContextDataset train_data(testing::random_bytes(400, 3),
                                        data::ContextDatasetOptions(4).name("train"));
  const data::ContextDataset val_data(testing::random_bytes(100, 4),
                                      data::ContextDatasetOptions(4).name("val"));
  torch::manual_seed(5);
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32));
  model->to(run.dtype);
  engine::CrossEntropyObjective plain(engine::forward_of(model), engine::LossUnit::kSample);
  InfAtCalls objective(plain, run.inf_calls);
  const engine::Plan plan =
      engine::resolve_plan(engine::BatchOptions().global_batch(32).micro_batch(8).base_lr(3e-3));
  auto optimizer = engine::make_optimizer(*model, engine::OptimizerOptions().lr(plan.lr));
  const engine::LrSchedule schedule = schedule_of(run.steps);
  engine::TrainingSetup setup =
      testing::setup_of(*model, objective, *optimizer, schedule, plan, train_data);
  setup.val_data = &val_data;
  setup.loss_scaler = run.scaler;
  RunResult result;
  setup.window_hooks = {&result.hooks};
  engine::Trainer trainer(
      setup, engine::TrainerOptions(run.trainer).total_steps(run.steps).eval_every(1).seed(9));
  trainer.add_sink(&result.sink);
  result.summary = trainer.fit();
  return result;
}

TEST(NonFiniteTraining, AnInfWindowIsDroppedReportedAndNotAStep) {
  RunOptions options;
  options.inf_calls = {10};  // micro-batch 2 of step 3
  const RunResult run = train(options);
  EXPECT_EQ(run.summary.steps, 6);
  EXPECT_EQ(run.summary.skipped_steps, 1);
  EXPECT_EQ(run.summary.final_loss_scale, 0);
  EXPECT_EQ(run.summary.samples, 7 * 32);  // the dropped window's samples were seen
  ASSERT_EQ(run.sink.windows.size(), 7u);
  const metrics::WindowRecord& skipped = run.sink.windows[2];
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(skipped.step, 3);
  EXPECT_EQ(skipped.skip_reason, "nonfinite_loss");
  EXPECT_EQ(skipped.skipped_steps, 1);
  EXPECT_EQ(skipped.lr, 0);
  EXPECT_EQ(skipped.loss_scale, 0);
  ASSERT_EQ(run.sink.notices.size(), 1u);
  EXPECT_NE(run.sink.notices[0].find("step 3 skipped: non-finite loss (inf)"), std::string::npos)
      << run.sink.notices[0];
  const engine::LrSchedule schedule = schedule_of(6);
  for (size_t i = 0; i < run.sink.windows.size(); ++i) {
    const metrics::WindowRecord& w = run.sink.windows[i];
    if (i == 2)
      continue;
    const int64_t step = static_cast<int64_t>(i < 2 ? i + 1 : i);
    EXPECT_FALSE(w.skipped);
    EXPECT_EQ(w.step, step);
    EXPECT_EQ(w.skipped_steps, i < 2 ? 0 : 1);
    EXPECT_DOUBLE_EQ(w.lr, schedule.lr_at(step - 1)) << "window " << i;
  }
  // Evaluations: before training and after each of the 6 steps, none for the skipped window.
  ASSERT_EQ(run.sink.evals.size(), 7u);
  EXPECT_EQ(run.sink.evals.back().step, 6);
  ASSERT_TRUE(run.sink.evals.back().accuracy.has_value());  // a classifier over next bytes
  EXPECT_GE(*run.sink.evals.back().accuracy, 0.0);
  EXPECT_LE(*run.sink.evals.back().accuracy, 1.0);
  EXPECT_EQ(run.summary.last_val_accuracy, run.sink.evals.back().accuracy);
  EXPECT_TRUE(std::isfinite(run.summary.last_train_loss));
  // Window hooks: a skipped window ends without a step.
  const std::vector<std::string> expected = {"begin", "step",  "begin", "step",  "begin",
                                             "skip",  "begin", "step",  "begin", "step",
                                             "begin", "step",  "begin", "step"};
  EXPECT_EQ(run.hooks.events, expected);
}

TEST(NonFiniteTraining, RealLossScaleOverflowBacksOffUntilTrainingProceeds) {
  // float32 cannot hold a scale of 2^128 or more: those windows overflow for certain; below it,
  // the scaled gradients of this model may or may not.
  engine::LossScaler scaler(
      engine::LossScalerOptions().init_scale(std::ldexp(1.0, 140)).growth_interval(1000));
  RunOptions options;
  options.dtype = torch::kFloat32;
  options.steps = 4;
  options.scaler = &scaler;
  const RunResult run = train(options);
  const int64_t skipped = run.summary.skipped_steps;
  EXPECT_GE(skipped, 13);
  EXPECT_LT(skipped, 26);  // max_consecutive_skips 25 would have stopped it
  EXPECT_EQ(run.summary.steps, 4);
  EXPECT_EQ(scaler.state().skipped_windows, skipped);
  EXPECT_EQ(run.summary.final_loss_scale, std::ldexp(1.0, 140 - static_cast<int>(skipped)));
  ASSERT_EQ(run.sink.windows.size(), static_cast<size_t>(4 + skipped));
  ASSERT_EQ(run.sink.notices.size(), static_cast<size_t>(skipped));
  for (int64_t i = 0; i < skipped; ++i) {
    const metrics::WindowRecord& w = run.sink.windows[i];
    EXPECT_TRUE(w.skipped);
    EXPECT_EQ(w.step, 1);
    EXPECT_EQ(w.skip_reason, "nonfinite_gradient");
    EXPECT_TRUE(std::isfinite(w.loss));  // the loss itself is recorded unscaled
    EXPECT_EQ(w.loss_scale, std::ldexp(1.0, 140 - static_cast<int>(i)));
    EXPECT_EQ(w.skipped_steps, i + 1);
  }
  EXPECT_NE(run.sink.notices[0].find("step 1 skipped: gradient overflow at loss scale 1.39"),
            std::string::npos)
      << run.sink.notices[0];
  EXPECT_NE(run.sink.notices[0].find("loss scale now 6.96"), std::string::npos)
      << run.sink.notices[0];
  for (int64_t step = 1; step <= 4; ++step) {
    const metrics::WindowRecord& w = run.sink.windows[skipped + step - 1];
    EXPECT_FALSE(w.skipped);
    EXPECT_EQ(w.step, step);
    EXPECT_TRUE(std::isfinite(w.grad_norm));
  }
}

TEST(NonFiniteTraining, TooManySkipsInARowStopNamingTheStepAndCount) {
  RunOptions options;
  options.inf_calls = {9, 13, 17, 21, 25};  // steps 3, 3, 3 and 3 again: then a stop
  options.trainer.max_consecutive_skips(3);
  const engine::NonFiniteError error = testing::nonfinite_error_of([&] { train(options); });
  EXPECT_EQ(error.step(), 3);
  EXPECT_NE(std::string(error.what())
                .find("stopping at optimizer step 3: 4 windows in a row were skipped as "
                      "non-finite (more than TrainerOptions.max_consecutive_skips = 3)"),
            std::string::npos)
      << error.what();
  options.inf_calls = {9, 13, 17, 25};  // three in a row, then a clean window: no stop
  EXPECT_EQ(train(options).summary.skipped_steps, 4);
}

TEST(NonFiniteTraining, AbortStopsAtTheFirstNonFiniteWindow) {
  RunOptions options;
  options.inf_calls = {14};  // micro-batch 2 of step 4
  options.trainer.on_nonfinite(engine::NonFinitePolicy::kAbort);
  const engine::NonFiniteError error = testing::nonfinite_error_of([&] { train(options); });
  EXPECT_EQ(error.step(), 4);
  EXPECT_NE(std::string(error.what()).find("optimizer step 4: the window's mean loss is inf"),
            std::string::npos)
      << error.what();
}

}  // namespace
}  // namespace bigbatch
