// Whole training runs: the same global batch split differently ends at the same weights.
#include <gtest/gtest.h>

#include "bigbatch/data/context_dataset.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/mlp.h"
#include "engine/training_helpers.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using testing::OutOfMemoryOnce;
using testing::random_bytes;
using testing::RecordingSink;

struct RunResult {
  torch::Tensor initial_weights;  // all parameters before the first step, flattened
  torch::Tensor weights;          // all parameters, flattened
  RecordingSink sink;
  testing::RecordingHooks hooks;
  engine::TrainSummary summary;
};

/// 20 steps with clipping and warmup+cosine on an MLP, float64 (AdamW unless `optimizer` says);
/// `out_of_memory_at_call` > 0 injects one out-of-memory error at that forward call.
RunResult train(int64_t micro_batch,
                engine::OptimizerOptions optimizer_options =
                    engine::OptimizerOptions().weight_decay(0.1).beta2(0.99),
                int64_t out_of_memory_at_call = 0, double dropout = 0.0) {
  const int64_t dataset_bytes = 600;
  const data::ContextDataset dataset(random_bytes(dataset_bytes, 3),
                                     data::ContextDatasetOptions(4).name("train"));
  torch::manual_seed(5);
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32).dropout(dropout));
  model->to(torch::kFloat64);
  engine::CrossEntropyObjective plain(engine::forward_of(model), engine::LossUnit::kSample);
  OutOfMemoryOnce objective(plain, out_of_memory_at_call);
  const engine::Plan plan = engine::resolve_plan(
      engine::BatchOptions().global_batch(64).micro_batch(micro_batch).base_lr(3e-3));
  auto optimizer = engine::make_optimizer(*model, optimizer_options.lr(plan.lr));
  const engine::LrSchedule schedule(
      engine::LrScheduleOptions().peak_lr(plan.lr).warmup_steps(5).total_steps(20));
  engine::TrainingSetup setup =
      testing::setup_of(*model, objective, *optimizer, schedule, plan, dataset);
  RunResult result;
  setup.window_hooks = {&result.hooks};
  engine::Trainer trainer(setup,
                          engine::TrainerOptions().total_steps(20).max_grad_norm(0.5).seed(9));
  trainer.add_sink(&result.sink);
  result.initial_weights = testing::flat_parameters(*model);
  result.summary = trainer.fit();
  result.weights = testing::flat_parameters(*model);
  return result;
}

TEST(TrainingEquivalence, SameWeightsAfter20StepsFor1x64And8x8And5x12Plus4) {
  const RunResult whole = train(64);
  const RunResult eights = train(8);
  const RunResult twelves = train(12);
  // 596 samples: windows of 64 and a short last window of 20 every epoch.
  ASSERT_EQ(whole.sink.windows.size(), 20u);
  EXPECT_EQ(whole.sink.windows[9].samples, 596 - 9 * 64);
  EXPECT_EQ(eights.sink.windows[0].micro_batches, 8);
  EXPECT_EQ(twelves.sink.windows[0].micro_batches, 6);
  EXPECT_EQ(twelves.sink.windows[9].micro_batches, 2);  // 20 as 12 + 8
  bool clipped = false;
  for (const auto& w : whole.sink.windows)
    clipped = clipped || w.clipped;
  EXPECT_TRUE(clipped) << "the test must exercise clipping";

  const double scale = whole.weights.abs().max().item<double>();
  EXPECT_LE((eights.weights - whole.weights).abs().max().item<double>(), 1e-9 * scale);
  EXPECT_LE((twelves.weights - whole.weights).abs().max().item<double>(), 1e-9 * scale);
  for (size_t i = 0; i < whole.sink.windows.size(); ++i) {
    EXPECT_NEAR(eights.sink.windows[i].loss, whole.sink.windows[i].loss, 1e-12);
    EXPECT_NEAR(twelves.sink.windows[i].loss, whole.sink.windows[i].loss, 1e-12);
  }
  // Training moved the weights (equal runs of unchanged weights would prove nothing), and the
  // same run again ends at the same weights.
  const double moved = (whole.weights - whole.initial_weights).abs().max().item<double>();
  EXPECT_GT(moved, 1e-3 * whole.initial_weights.abs().max().item<double>()) << moved;
  EXPECT_TRUE(torch::equal(eights.initial_weights, whole.initial_weights));
  const RunResult again = train(64);
  EXPECT_TRUE(torch::equal(again.weights, whole.weights));
}

TEST(TrainingEquivalence, SgdWithMomentumToo) {
  const auto sgd = engine::OptimizerOptions()
                       .kind(engine::OptimizerKind::kSgd)
                       .momentum(0.9)
                       .nesterov(true)
                       .weight_decay(1e-2);
  const RunResult whole = train(64, sgd);
  const RunResult twelves = train(12, sgd);
  const double scale = whole.weights.abs().max().item<double>();
  EXPECT_LE((twelves.weights - whole.weights).abs().max().item<double>(), 1e-9 * scale);
  EXPECT_FALSE(torch::equal(whole.weights, train(64).weights));  // it is not AdamW
}

TEST(TrainingEquivalence, OutOfMemoryMidWindowRestartsItAtHalfTheMicroBatch) {
  // 8 micro-batches of 8 per window: call 19 is the third micro-batch of step 3.
  const RunResult recovered =
      train(8, engine::OptimizerOptions().weight_decay(0.1).beta2(0.99), 19);
  const RunResult small = train(4);
  ASSERT_EQ(recovered.sink.notices.size(), 1u);
  EXPECT_NE(recovered.sink.notices[0].find("micro-batch 8 in step 3"), std::string::npos)
      << recovered.sink.notices[0];
  EXPECT_EQ(recovered.sink.windows[1].micro_batch, 8);
  EXPECT_EQ(recovered.sink.windows[2].micro_batch, 4);
  EXPECT_EQ(recovered.sink.windows[2].micro_batches, 16);
  EXPECT_EQ(recovered.sink.windows[2].samples, 64);
  EXPECT_EQ(recovered.summary.final_micro_batch, 4);
  EXPECT_EQ(recovered.summary.samples, small.summary.samples);
  // Window hooks hear the restart as a second beginning of step 3, then one step.
  std::vector<std::string> expected;
  for (int step = 1; step <= 20; ++step) {
    expected.insert(expected.end(), {"begin", "step"});
    if (step == 3)
      expected.insert(expected.end() - 1, "begin");
  }
  EXPECT_EQ(recovered.hooks.events, expected);
  const double scale = small.weights.abs().max().item<double>();
  EXPECT_LE((recovered.weights - small.weights).abs().max().item<double>(), 1e-9 * scale);
}

TEST(TrainingEquivalence, ARestartedWindowDrawsTheSameRandomNumbersAsItsFirstAttempt) {
  // With dropout, the retry at half the micro-batch starts from the generator state the window
  // began with: after an out-of-memory error in the third micro-batch of step 1, the run is the
  // run that used micro-batch 4 from the start.
  const auto adamw = engine::OptimizerOptions().weight_decay(0.1).beta2(0.99);
  const RunResult recovered = train(8, adamw, 3, 0.2);
  const RunResult small = train(4, adamw, 0, 0.2);
  ASSERT_EQ(recovered.sink.notices.size(), 1u);
  const double scale = small.weights.abs().max().item<double>();
  EXPECT_LE((recovered.weights - small.weights).abs().max().item<double>(), 1e-9 * scale);
  EXPECT_FALSE(torch::equal(small.weights, train(4).weights)) << "dropout must act";
}

TEST(TrainingEquivalence, OutOfMemoryAtMicroBatchOneIsAnError) {
  try {
    train(1, engine::OptimizerOptions(), 5);
    ADD_FAILURE() << "no error";
  } catch (const c10::OutOfMemoryError& error) {
    // Call 5 is the fifth micro-batch of step 1.
    EXPECT_EQ(std::string(error.what_without_backtrace()),
              "out of memory at micro-batch 1 in step 1, the smallest there is; raise the memory "
              "budget or recompute activations in backward (checkpointing). injected: out of "
              "memory in forward");
  }
}

/// SGD whose step runs out of memory, as an optimizer allocating its state over budget would.
class OutOfMemoryStepSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure) override {
    C10_THROW_ERROR(OutOfMemoryError, "injected: out of memory in the optimizer step");
  }
};

TEST(TrainingEquivalence, OutOfMemoryAtTheWindowBoundaryIsAnErrorNotARetry) {
  // A smaller micro-batch cannot help the optimizer step, and the step may have updated some
  // parameters already: the trainer must stop with a clear error instead of retrying.
  const data::ContextDataset dataset(random_bytes(600, 3),
                                     data::ContextDatasetOptions(4).name("train"));
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32));
  engine::CrossEntropyObjective objective(engine::forward_of(model), engine::LossUnit::kSample);
  const engine::Plan plan =
      engine::resolve_plan(engine::BatchOptions().global_batch(64).micro_batch(8));
  OutOfMemoryStepSgd optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  const engine::LrSchedule schedule(engine::LrScheduleOptions().peak_lr(0.1).total_steps(3));
  engine::TrainingSetup setup =
      testing::setup_of(*model, objective, optimizer, schedule, plan, dataset);
  engine::Trainer trainer(setup, engine::TrainerOptions().total_steps(3));
  RecordingSink sink;
  trainer.add_sink(&sink);
  try {
    trainer.fit();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("out of memory at the window boundary of step 1"), std::string::npos)
        << message;
    EXPECT_NE(message.find("raise the memory budget"), std::string::npos) << message;
  }
  EXPECT_TRUE(sink.notices.empty()) << "retried: " << sink.notices.front();
}

/// Delegates to another objective, but an evaluation of more than `most` samples at once runs
/// out of memory, as a forward pass over budget would.
class EvaluationOverBudget : public engine::Objective {
 public:
  EvaluationOverBudget(engine::Objective& inner, int64_t most) : inner_(inner), most_(most) {}
  engine::LossUnit unit() const override { return inner_.unit(); }
  engine::Counts count(const data::Batch& batch) const override { return inner_.count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override { return inner_.loss_sum(batch); }
  engine::EvalSums evaluate(const data::Batch& batch) override {
    sizes.push_back(batch.size());
    if (batch.size() > most_) {
      C10_THROW_ERROR(OutOfMemoryError, "injected: out of memory in an evaluation");
    }
    return inner_.evaluate(batch);
  }
  std::vector<int64_t> sizes;  ///< the samples of every evaluation pass tried

 private:
  engine::Objective& inner_;
  int64_t most_;
};

/// Evaluations before and after each of 4 steps at micro-batch 8, of at most `most` samples a
/// pass; the trainer's error, if any, in `error`.
RecordingSink train_evaluating(int64_t most, std::vector<int64_t>* sizes, std::string* error) {
  const data::ContextDataset train_data(random_bytes(400, 3),
                                        data::ContextDatasetOptions(4).name("train"));
  const data::ContextDataset val_data(random_bytes(60, 4),
                                      data::ContextDatasetOptions(4).name("val"));
  torch::manual_seed(5);
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32));
  model->to(torch::kFloat64);
  engine::CrossEntropyObjective plain(engine::forward_of(model), engine::LossUnit::kSample);
  EvaluationOverBudget objective(plain, most);
  const engine::Plan plan =
      engine::resolve_plan(engine::BatchOptions().global_batch(32).micro_batch(8));
  auto optimizer = engine::make_optimizer(*model, engine::OptimizerOptions().lr(plan.lr));
  const engine::LrSchedule schedule(engine::LrScheduleOptions().peak_lr(plan.lr).total_steps(4));
  engine::TrainingSetup setup =
      testing::setup_of(*model, objective, *optimizer, schedule, plan, train_data);
  setup.val_data = &val_data;
  engine::Trainer trainer(setup, engine::TrainerOptions().total_steps(4).eval_every(2).seed(9));
  RecordingSink sink;
  trainer.add_sink(&sink);
  try {
    trainer.fit();
  } catch (const std::runtime_error& thrown) {
    *error = thrown.what();
  }
  *sizes = objective.sizes;
  return sink;
}

TEST(TrainingEquivalence, OutOfMemoryInAnEvaluationEvaluatesAgainAtHalfTheBatch) {
  std::vector<int64_t> sizes;
  std::string error;
  const RecordingSink whole = train_evaluating(64, &sizes, &error);
  ASSERT_EQ(error, "");
  const RecordingSink halved = train_evaluating(5, &sizes, &error);
  ASSERT_EQ(error, "");
  // 56 validation samples: 8 fails, then 4 a pass for the rest of the run, training unchanged.
  EXPECT_EQ(sizes.front(), 8);
  EXPECT_EQ(sizes.size(), 1 + 3 * 14u);
  EXPECT_EQ(sizes.back(), 4);
  ASSERT_EQ(halved.notices.size(), 1u);
  EXPECT_EQ(halved.notices[0],
            "out of memory in the evaluation after optimizer step 0 at 8 samples a pass; "
            "evaluating at 4");
  ASSERT_EQ(halved.evals.size(), 3u);  // steps 0, 2 and 4
  ASSERT_EQ(halved.windows.size(), 4u);
  for (size_t i = 0; i < halved.evals.size(); ++i) {
    EXPECT_NEAR(halved.evals[i].loss, whole.evals[i].loss, 1e-12) << i;
    EXPECT_EQ(halved.evals[i].samples, 56);
  }
  for (size_t i = 0; i < halved.windows.size(); ++i) {
    EXPECT_EQ(halved.windows[i].micro_batch, 8);
    EXPECT_EQ(halved.windows[i].loss, whole.windows[i].loss);
  }

  // Not even one sample fits: an error that says where, not a retry forever.
  train_evaluating(0, &sizes, &error);
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 4, 2, 1}));
  EXPECT_NE(error.find("out of memory in the evaluation after optimizer step 0 (1 samples a "
                       "forward pass, no gradients); raise the memory budget. injected"),
            std::string::npos)
      << error;
}

TEST(TrainingEquivalence, ScheduleAdvancesOncePerOptimizerStep) {
  const RunResult run = train(8);
  const engine::LrSchedule schedule(
      engine::LrScheduleOptions().peak_lr(3e-3).warmup_steps(5).total_steps(20));
  ASSERT_EQ(run.sink.windows.size(), 20u);
  for (size_t i = 0; i < run.sink.windows.size(); ++i) {
    EXPECT_EQ(run.sink.windows[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_DOUBLE_EQ(run.sink.windows[i].lr, schedule.lr_at(static_cast<int64_t>(i)))
        << "step " << i + 1 << " with 8 micro-batches per step";
  }
}

}  // namespace
}  // namespace bigbatch
