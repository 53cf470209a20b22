// Evaluation on the held-out split: the mean loss over its samples, in batches, with the weights'
// compute-dtype copies made once for the whole evaluation.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "bigbatch/dist/local_communicator.h"
#include "bigbatch/engine/evaluation.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch {
namespace {

/// Samples i = 0 .. n-1 with inputs (1) = [i].
class CountingDataset : public data::Dataset {
 public:
  explicit CountingDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::Batch get(const std::vector<int64_t>& indices) const override {
    const torch::Tensor inputs =
        torch::tensor(indices, torch::kLong).to(torch::kFloat).unsqueeze(1);  // (B, 1)
    return {inputs, torch::zeros({static_cast<int64_t>(indices.size())}, torch::kLong)};
  }
  std::string describe() const override { return "counting"; }

 private:
  int64_t n_;
};

/// Loss of a sample: its input times the weight's bf16 copy; records each batch's copy.
class ScaledInputObjective : public engine::Objective {
 public:
  explicit ScaledInputObjective(torch::Tensor weight) : weight_(std::move(weight)) {}
  engine::LossUnit unit() const override { return engine::LossUnit::kSample; }
  engine::Counts count(const data::Batch& batch) const override {
    engine::Counts counts;
    counts.samples = counts.tokens = batch.size();
    return counts;
  }
  torch::Tensor loss_sum(const data::Batch& batch) override {
    const torch::Tensor copy = nn::weight_in_dtype(weight_, torch::kBFloat16);  // (1)
    copies_.push_back(copy);  // held, so that no later copy can take its address
    return (batch.inputs * copy.to(torch::kFloat)).sum();
  }
  /// The distinct copies the batches read.
  size_t distinct_copies() const {
    std::set<const c10::TensorImpl*> distinct;
    for (const torch::Tensor& copy : copies_)
      distinct.insert(copy.unsafeGetTensorImpl());
    return distinct.size();
  }

 private:
  torch::Tensor weight_;
  std::vector<torch::Tensor> copies_;  // each batch's bf16 copy
};

TEST(Evaluate, MeanLossOverBatchesWithOneWeightCopy) {
  torch::nn::Linear model(1, 1);  // put in eval mode and back; its weight is the objective's
  {
    const torch::NoGradGuard no_grad;
    model->weight.fill_(0.5);
  }
  ScaledInputObjective objective(model->weight);
  CountingDataset data(7);
  dist::LocalCommunicator alone;
  engine::EvaluationInput input;
  input.model = model.get();
  input.objective = &objective;
  input.data = &data;
  input.batch = 3;  // batches of 3, 3 and 1
  input.step = 4;
  input.communicator = &alone;
  const metrics::EvalRecord record = engine::evaluate(input);
  EXPECT_DOUBLE_EQ(record.loss, 0.5 * (0 + 1 + 2 + 3 + 4 + 5 + 6) / 7.0);
  EXPECT_EQ(record.samples, 7);
  EXPECT_EQ(record.step, 4);
  EXPECT_FALSE(record.accuracy.has_value());
  EXPECT_TRUE(model->is_training());
  EXPECT_EQ(objective.distinct_copies(), 1u);  // one cast for the three batches
  EXPECT_FALSE(nn::weight_copies_kept());      // and freed after

  // Outside an evaluation every call makes its own copy.
  objective.loss_sum(data.get({0}));
  EXPECT_EQ(objective.distinct_copies(), 2u);
}

}  // namespace
}  // namespace bigbatch
