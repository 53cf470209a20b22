// bf16 autocast through the engine: training a tiny GPT, and the error of accumulated window
// gradients against a float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>

#include "bigbatch/core/check.h"
#include "bigbatch/data/sequence_dataset.h"
#include "bigbatch/engine/gradient_error.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/gpt.h"
#include "engine/training_helpers.h"

namespace bigbatch::engine {
namespace {

using nn::Precision;
using testing::random_bytes;

/// Repetitive text a tiny GPT learns quickly.
std::vector<uint8_t> repetitive_text(size_t n) {
  const std::string phrase = "the quick brown fox jumps over the lazy dog. ";
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i)
    bytes[i] = static_cast<uint8_t>(phrase[i % phrase.size()]);
  return bytes;
}

models::GptOptions tiny_gpt() {
  return models::GptOptions().context(16).layers(2).heads(2).embed(32);
}

TEST(MixedPrecision, Bf16TrainingKeepsFp32WeightsAndGradientsAndLearns) {
  const data::SequenceDataset dataset(repetitive_text(4000), data::SequenceDatasetOptions(16));
  torch::manual_seed(3);
  models::Gpt model(tiny_gpt());
  AutocastObjective objective(
      std::make_unique<CrossEntropyObjective>(forward_of(model), LossUnit::kToken),
      Precision::kBf16);
  const Plan plan = resolve_plan(BatchOptions().global_batch(16).micro_batch(4).base_lr(3e-3));
  auto optimizer = make_optimizer(*model, OptimizerOptions().lr(plan.lr));
  const LrSchedule schedule(LrScheduleOptions().peak_lr(plan.lr).warmup_steps(2).total_steps(20));
  engine::TrainingSetup setup =
      testing::setup_of(*model, objective, *optimizer, schedule, plan, dataset);
  testing::RecordingSink sink;
  Trainer trainer(setup, TrainerOptions().total_steps(20).max_grad_norm(1.0));
  trainer.add_sink(&sink);
  const TrainSummary summary = trainer.fit();

  ASSERT_EQ(summary.steps, 20);
  EXPECT_EQ(summary.skipped_steps, 0);
  ASSERT_EQ(sink.windows.size(), 20u);
  for (const auto& window : sink.windows)
    EXPECT_TRUE(std::isfinite(window.loss)) << "step " << window.step;
  EXPECT_LT(sink.windows.back().loss, 0.8 * sink.windows.front().loss);  // 5.54 -> 3.90
  for (const auto& parameter : model->parameters())
    EXPECT_EQ(parameter.scalar_type(), torch::kFloat);

  // One more micro-batch: the loss the accumulator sees and the gradients are float32.
  const torch::Tensor loss = objective.loss_sum(dataset.get({0, 1}));
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
  loss.backward();
  for (const auto& parameter : model->parameters())
    EXPECT_EQ(parameter.grad().scalar_type(), torch::kFloat);
}

TEST(MixedPrecision, AutocastObjectiveRefusesFp16OnCpu) {
  models::Gpt model(tiny_gpt());
  EXPECT_THROW(AutocastObjective(
                   std::make_unique<CrossEntropyObjective>(forward_of(model), LossUnit::kToken),
                   Precision::kFp16),
               InputError);
}

TEST(WindowGradientError, Fp32IsExactEnoughAndBf16DoesNotGrowWithAccumSteps) {
  const data::SequenceDataset dataset(random_bytes(3000, 4), data::SequenceDatasetOptions(16));
  torch::manual_seed(5);
  models::Gpt model(tiny_gpt());
  CrossEntropyObjective objective(forward_of(model), LossUnit::kToken);
  std::vector<int64_t> first(32);
  std::iota(first.begin(), first.end(), 0);
  const data::Batch window = dataset.get(first);
  const std::vector<torch::Tensor> before = [&] {
    std::vector<torch::Tensor> copies;
    for (const auto& p : model->parameters())
      copies.push_back(p.detach().clone());
    return copies;
  }();

  const auto errors = window_gradient_errors(
      *model, objective, window, GradientErrorOptions().accum_steps({1, 2, 4, 8, 16, 32}));
  ASSERT_EQ(errors.size(), 12u);
  double bf16_at_one = 0.0;
  for (const GradientError& e : errors) {
    SCOPED_TRACE(nn::to_string(e.precision) + " accum_steps " + std::to_string(e.accum_steps));
    EXPECT_EQ(e.micro_batch * e.accum_steps, 32);
    if (e.precision == Precision::kFp32) {
      EXPECT_LT(e.relative_error, 1e-5);
      EXPECT_GT(e.relative_error, 0.0);  // float32 is not float64: the comparison is real
    } else {
      if (e.accum_steps == 1)
        bf16_at_one = e.relative_error;
      // bf16 rounds activations and weights to 8 bits of mantissa (2^-9 ~ 2e-3 relative).
      EXPECT_LT(e.relative_error, 5e-2);
      EXPECT_GT(e.relative_error, 1e-4);
      // Accumulation is in float32: the micro-batches' bf16 errors are independent and average
      // out rather than add up, so more micro-batches must not make the window gradient worse.
      EXPECT_LT(e.relative_error, 2.0 * bf16_at_one);
    }
  }
  // The model is left as it was: float32, bit-identical weights, no gradients.
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(params[i], before[i]));
    EXPECT_FALSE(params[i].grad().defined());
  }
  EXPECT_THROW(
      window_gradient_errors(*model, objective, window, GradientErrorOptions().accum_steps({3})),
      InputError);
}

}  // namespace
}  // namespace bigbatch::engine
