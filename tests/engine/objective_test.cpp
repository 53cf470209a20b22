// Objectives: the summed loss, and the loss sum with correct predictions for evaluation.
#include <gtest/gtest.h>

#include "bigbatch/engine/objective.h"

namespace bigbatch {
namespace {

/// An objective whose "model" returns fixed logits, whatever the inputs.
engine::CrossEntropyObjective fixed_logits(const torch::Tensor& logits, engine::LossUnit unit) {
  return engine::CrossEntropyObjective([logits](const torch::Tensor&) { return logits; }, unit);
}

TEST(Objective, EvaluateCountsSamplesWhoseArgMaxIsTheTarget) {
  // (3, 4) logits: predictions 2, 0, 3.
  const torch::Tensor logits = torch::tensor({{0.1, 0.2, 0.9, 0.0},  //
                                              {2.0, 1.0, 0.0, 0.0},
                                              {0.0, 0.0, 0.5, 0.6}});
  auto objective = fixed_logits(logits, engine::LossUnit::kSample);
  const data::Batch batch{torch::zeros({3, 1}), torch::tensor({2, 1, 3}, torch::kLong)};
  const engine::EvalSums sums = objective.evaluate(batch);
  EXPECT_EQ(sums.correct, 2);
  EXPECT_TRUE(torch::equal(sums.loss_sum, objective.loss_sum(batch)));
}

TEST(Objective, EvaluateCountsTokensAndSkipsPadding) {
  // (1, 3, 2) logits: predictions 1, 0, 1; the last target is padding.
  const torch::Tensor logits = torch::tensor({{{0.0, 1.0}, {1.0, 0.0}, {0.0, 1.0}}});
  auto objective = fixed_logits(logits, engine::LossUnit::kToken);
  const data::Batch batch{torch::zeros({1, 3}), torch::tensor({{1, 1, -100}}, torch::kLong)};
  const engine::EvalSums sums = objective.evaluate(batch);
  EXPECT_EQ(sums.correct, 1);  // the padded position would have matched nothing anyway
  const data::Batch all_right{torch::zeros({1, 3}), torch::tensor({{1, 0, -100}}, torch::kLong)};
  EXPECT_EQ(objective.evaluate(all_right).correct, 2);
}

TEST(Objective, AutocastEvaluateReturnsAFloat32LossAndTheSameCount) {
  const torch::Tensor logits = torch::tensor({{0.1, 0.9}, {0.8, 0.2}});
  auto inner = std::make_unique<engine::CrossEntropyObjective>(
      fixed_logits(logits, engine::LossUnit::kSample));
  engine::AutocastObjective objective(std::move(inner), nn::Precision::kBf16);
  const data::Batch batch{torch::zeros({2, 1}), torch::tensor({1, 1}, torch::kLong)};
  const engine::EvalSums sums = objective.evaluate(batch);
  EXPECT_EQ(sums.correct, 1);
  EXPECT_EQ(sums.loss_sum.scalar_type(), torch::kFloat);
}

/// An objective without a notion of correct predictions keeps the default: no accuracy.
class SquaredNorm : public engine::Objective {
 public:
  engine::LossUnit unit() const override { return engine::LossUnit::kSample; }
  engine::Counts count(const data::Batch& batch) const override {
    engine::Counts counts;
    counts.samples = counts.tokens = batch.size();
    return counts;
  }
  torch::Tensor loss_sum(const data::Batch& batch) override { return batch.inputs.pow(2).sum(); }
};

TEST(Objective, DefaultEvaluateHasNoAccuracy) {
  SquaredNorm objective;
  const data::Batch batch{torch::ones({2, 3}), torch::zeros({2}, torch::kLong)};
  const engine::EvalSums sums = objective.evaluate(batch);
  EXPECT_EQ(sums.correct, -1);
  EXPECT_EQ(sums.loss_sum.item<double>(), 6.0);
}

}  // namespace
}  // namespace bigbatch
