// The accumulator with a loss scaler and non-finite windows: a skipped window leaves no trace,
// scaled training equals unscaled training.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bigbatch/core/torch_compat.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/models/mlp.h"
#include "engine/accumulation_helpers.h"
#include "engine/training_helpers.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using engine::GradientAccumulator;
using engine::LossScaler;
using engine::LossScalerOptions;
using engine::SkipReason;
using engine::WindowResult;

constexpr double kInf = std::numeric_limits<double>::infinity();

/// A float64 (unless told) MLP from a fixed seed.
models::Mlp seeded_mlp(torch::Dtype dtype) {
  torch::manual_seed(21);
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32));
  model->to(dtype);
  return model;
}

/// An AdamW-trained MLP over 8 windows of 16 samples, each run as 4 x 4.
struct MlpRun {
  explicit MlpRun(torch::Dtype dtype = torch::kFloat64)
      : model(seeded_mlp(dtype)),
        objective(engine::forward_of(model), engine::LossUnit::kSample),
        schedule(engine::LrScheduleOptions().peak_lr(1e-2).warmup_steps(3).total_steps(10)),
        data{torch::randint(0, 256, {128, 4}, torch::kLong),
             torch::randint(0, 256, {128}, torch::kLong)},
        optimizer(engine::make_optimizer(
            *model, engine::OptimizerOptions().lr(1e-2).weight_decay(0.1).beta2(0.99))) {}

  GradientAccumulator accumulator(LossScaler* scaler, double max_grad_norm = 0.0,
                                  engine::NonFinitePolicy policy = engine::NonFinitePolicy::kSkip) {
    GradientAccumulator result(
        model->parameters(), *optimizer, &schedule,
        engine::AccumulatorOptions().max_grad_norm(max_grad_norm).on_nonfinite(policy));
    result.set_loss_scaler(scaler);
    return result;
  }

  /// Window `index` (16 samples) as 4 micro-batches; `poison(micro, loss_sum)` may change a
  /// micro-batch's loss before backward.
  template <typename Poison>
  WindowResult run(GradientAccumulator& acc, int64_t index, Poison poison) {
    const data::Batch window = testing::rows(data, 16 * index, 16 * index + 16);
    acc.begin_window(objective.count(window));
    int64_t micro = 0;
    for (const data::Batch& part : testing::split(window, {4, 4, 4, 4})) {
      acc.backward(poison(micro++, objective.loss_sum(part)), objective.count(part));
    }
    return acc.step();
  }
  WindowResult run(GradientAccumulator& acc, int64_t index) {
    return run(acc, index, [](int64_t, const torch::Tensor& loss) { return loss; });
  }

  /// Every parameter, flattened and concatenated.
  torch::Tensor weights() const { return testing::flat_parameters(*model); }

  /// AdamW's state (exp_avg, exp_avg_sq, step per parameter) and every group's lr, copied.
  std::vector<torch::Tensor> optimizer_state() const {
    std::vector<torch::Tensor> state;
    for (const auto& group : optimizer->param_groups()) {
      state.push_back(torch::tensor(group.options().get_lr(), torch::kFloat64));
      for (const torch::Tensor& p : group.params()) {
        const torch::optim::OptimizerParamState* found = compat::optimizer_state_of(*optimizer, p);
        if (found == nullptr)
          continue;
        const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found);
        state.push_back(s.exp_avg().clone());
        state.push_back(s.exp_avg_sq().clone());
        state.push_back(torch::tensor(s.step()));
      }
    }
    return state;
  }

  models::Mlp model;
  engine::CrossEntropyObjective objective;
  engine::LrSchedule schedule;
  data::Batch data;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i]))
      return false;
  }
  return true;
}

/// Multiplies micro-batch `target`'s loss by a tensor holding inf.
auto inf_at(int64_t target) {
  return [target](int64_t micro, const torch::Tensor& loss) {
    return micro == target ? loss * torch::full({}, kInf, loss.options()) : loss;
  };
}

/// Adds sqrt(w - w) of the first parameter: value 0, gradient inf (the loss stays finite).
auto inf_gradient_at(int64_t target, const torch::Tensor& w) {
  return [target, w](int64_t micro, const torch::Tensor& loss) {
    return micro == target ? loss + torch::sqrt(w - w.detach()).sum() : loss;
  };
}

TEST(LossScaling, InfInOneMicroBatchSkipsTheWindowAndLeavesNoTrace) {
  MlpRun s;
  LossScaler scaler(LossScalerOptions().init_scale(1024));
  GradientAccumulator acc = s.accumulator(&scaler, 0.5);
  s.run(acc, 0);
  s.run(acc, 1);
  const torch::Tensor weights = s.weights();
  const std::vector<torch::Tensor> state = s.optimizer_state();
  ASSERT_EQ(state.size(), 2u + 3u * s.model->parameters().size());  // AdamW has stepped

  const WindowResult skipped = s.run(acc, 2, inf_at(1));  // micro-step 2 of step 3
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(skipped.skip_reason, SkipReason::kNonFiniteLoss);
  EXPECT_EQ(skipped.step, 3);
  EXPECT_TRUE(std::isinf(skipped.mean_loss));
  EXPECT_EQ(skipped.loss_scale, 1024);
  EXPECT_EQ(acc.steps_taken(), 2);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.state().skipped_windows, 1);
  EXPECT_TRUE(torch::equal(s.weights(), weights));
  EXPECT_TRUE(all_equal(s.optimizer_state(), state));
  for (const torch::Tensor& p : s.model->parameters())
    EXPECT_FALSE(p.grad().defined());

  // The next window is step 3, at step 3's learning rate and the backed-off scale.
  const WindowResult next = s.run(acc, 3);
  EXPECT_FALSE(next.skipped);
  EXPECT_EQ(next.step, 3);
  EXPECT_DOUBLE_EQ(next.lr, s.schedule.lr_at(2));
  EXPECT_EQ(next.loss_scale, 512);

  // Identical to a run that never saw the poisoned window.
  MlpRun clean;
  GradientAccumulator plain = clean.accumulator(nullptr, 0.5);
  for (const int64_t index : {0, 1, 3})
    EXPECT_EQ(clean.run(plain, index).loss_scale, 0);
  EXPECT_LE(testing::relative_difference(s.weights(), clean.weights()), 1e-12);
}

TEST(LossScaling, ScaledTrainingEqualsUnscaledTrainingAndClipsUnscaledGradients) {
  MlpRun scaled;
  MlpRun plain;
  LossScaler scaler(LossScalerOptions().init_scale(1024).growth_interval(2));
  GradientAccumulator with = scaled.accumulator(&scaler, 0.05);
  GradientAccumulator without = plain.accumulator(nullptr, 0.05);
  bool clipped = false;
  for (int64_t index = 0; index < 6; ++index) {
    const WindowResult a = scaled.run(with, index);
    const WindowResult b = plain.run(without, index);
    EXPECT_EQ(a.loss_scale, static_cast<double>(1024 << (index / 2))) << "window " << index;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-12 * b.grad_norm) << "window " << index;
    EXPECT_EQ(a.clipped, b.clipped);
    EXPECT_NEAR(a.mean_loss, b.mean_loss, 1e-12);
    clipped = clipped || a.clipped;
  }
  EXPECT_TRUE(clipped) << "the test must exercise clipping";
  EXPECT_EQ(scaler.scale(), 8192);
  EXPECT_LE(testing::relative_difference(scaled.weights(), plain.weights()), 1e-12);
}

TEST(LossScaling, NonFiniteGradientWithoutScalerIsSkippedButAHugeFiniteOneIsNot) {
  MlpRun s;
  GradientAccumulator acc = s.accumulator(nullptr);
  s.run(acc, 0);
  const torch::Tensor weights = s.weights();
  const torch::Tensor first = s.model->parameters().front();
  const WindowResult skipped = s.run(acc, 1, inf_gradient_at(2, first));
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(skipped.skip_reason, SkipReason::kNonFiniteGradient);
  EXPECT_TRUE(std::isfinite(skipped.mean_loss));
  EXPECT_EQ(skipped.step, 2);
  EXPECT_TRUE(torch::equal(s.weights(), weights));

  // float32 gradients whose global norm overflows are still finite: an optimizer step.
  const torch::Tensor w = torch::zeros({100}, torch::kFloat32).requires_grad_();
  torch::optim::SGD sgd(std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(1e-40));
  GradientAccumulator huge({w}, sgd, nullptr);
  huge.begin_window({1, 1});
  huge.backward((w - w.detach()).sum() * 1e38f, {1, 1});
  const WindowResult result = huge.step();
  EXPECT_FALSE(result.skipped);
  EXPECT_TRUE(std::isinf(result.grad_norm));
  EXPECT_EQ(result.step, 1);
}

TEST(LossScaling, AbortNamesTheStepAndWhatWasNonFinite) {
  MlpRun s;
  LossScaler scaler(LossScalerOptions().init_scale(64));
  GradientAccumulator acc = s.accumulator(&scaler, 0.0, engine::NonFinitePolicy::kAbort);
  s.run(acc, 0);
  s.run(acc, 1);
  const torch::Tensor weights = s.weights();
  const engine::NonFiniteError error =
      testing::nonfinite_error_of([&] { s.run(acc, 2, inf_at(3)); });
  EXPECT_EQ(error.step(), 3);
  EXPECT_NE(std::string(error.what()).find("optimizer step 3: the window's mean loss is inf"),
            std::string::npos)
      << error.what();
  EXPECT_TRUE(torch::equal(s.weights(), weights));
  EXPECT_EQ(scaler.scale(), 64);  // untouched: the window never reached the scaler

  // Under a scaler a finite loss with an overflowing gradient is its backoff, not an abort.
  const torch::Tensor first = s.model->parameters().front();
  const WindowResult overflow = s.run(acc, 3, inf_gradient_at(0, first));
  EXPECT_TRUE(overflow.skipped);
  EXPECT_EQ(overflow.skip_reason, SkipReason::kNonFiniteGradient);
  EXPECT_EQ(scaler.scale(), 32);
  EXPECT_EQ(s.run(acc, 4).step, 3);  // and training goes on

  // Without a scaler the same gradient aborts.
  MlpRun t;
  GradientAccumulator strict = t.accumulator(nullptr, 0.0, engine::NonFinitePolicy::kAbort);
  const engine::NonFiniteError strict_error = testing::nonfinite_error_of(
      [&] { t.run(strict, 0, inf_gradient_at(0, t.model->parameters().front())); });
  EXPECT_EQ(strict_error.step(), 1);
  EXPECT_NE(
      std::string(strict_error.what()).find("optimizer step 1: the window gradient holds inf"),
      std::string::npos)
      << strict_error.what();
}

TEST(LossScaling, ScaleCannotChangeInsideAWindow) {
  MlpRun s;
  LossScaler scaler(LossScalerOptions().init_scale(64));
  GradientAccumulator acc = s.accumulator(&scaler);
  const data::Batch window = testing::rows(s.data, 0, 16);
  acc.begin_window(s.objective.count(window));
  acc.backward(s.objective.loss_sum(testing::rows(window, 0, 8)), {8, 8});
  scaler.load_state({128, 0, 0});
  EXPECT_THROW(acc.backward(s.objective.loss_sum(testing::rows(window, 8, 16)), {8, 8}),
               std::logic_error);
  EXPECT_THROW(acc.set_loss_scaler(nullptr), std::logic_error);
}

}  // namespace
}  // namespace bigbatch
