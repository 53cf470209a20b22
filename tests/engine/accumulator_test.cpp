// The accumulation promise: the window gradient equals the gradient of the window's mean loss,
// whatever the split.
#include "bigbatch/engine/accumulator.h"

#include <gtest/gtest.h>

#include "bigbatch/dist/gradient_reducer.h"
#include "bigbatch/dist/local_communicator.h"
#include "bigbatch/models/gpt.h"
#include "bigbatch/models/mlp.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/precision.h"
#include "engine/accumulation_helpers.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using engine::CrossEntropyObjective;
using engine::LossUnit;
using testing::relative_difference;
using testing::split;
using testing::window_gradient;

struct MlpCase {
  models::Mlp model;
  std::unique_ptr<CrossEntropyObjective> objective;
  data::Batch batch;
};

MlpCase make_mlp(torch::Dtype dtype, int64_t samples) {
  torch::manual_seed(7);
  MlpCase c{models::Mlp(models::MlpOptions().context(4).embed(8).hidden(32)), nullptr, {}};
  c.model->to(dtype);
  models::Mlp model = c.model;
  c.objective =
      std::make_unique<CrossEntropyObjective>(engine::forward_of(model), LossUnit::kSample);
  c.batch = {torch::randint(0, 256, {samples, 4}, torch::kLong),
             torch::randint(0, 256, {samples}, torch::kLong)};
  return c;
}

struct GptCase {
  models::Gpt model;
  std::unique_ptr<CrossEntropyObjective> objective;
  data::Batch batch;
};

GptCase make_gpt(torch::Dtype dtype, int64_t samples) {
  torch::manual_seed(11);
  GptCase c{models::Gpt(models::GptOptions().context(8).layers(2).heads(2).embed(16)), nullptr, {}};
  c.model->to(dtype);
  models::Gpt model = c.model;
  c.objective =
      std::make_unique<CrossEntropyObjective>(engine::forward_of(model), LossUnit::kToken);
  c.batch = {torch::randint(0, 256, {samples, 8}, torch::kLong),
             torch::randint(0, 256, {samples, 8}, torch::kLong)};
  return c;
}

template <typename Case>
void expect_every_split_in_two_matches(Case& c, double tolerance) {
  const auto parameters = c.model->parameters();
  const int64_t samples = c.batch.size();
  const torch::Tensor full = window_gradient(parameters, *c.objective, {c.batch});
  for (int64_t first = 1; first < samples; ++first) {
    const torch::Tensor parts =
        window_gradient(parameters, *c.objective, split(c.batch, {first, samples - first}));
    EXPECT_LE(relative_difference(parts, full), tolerance)
        << "split " << first << " + " << samples - first;
  }
}

TEST(AccumulatorEquivalence, MlpEverySplitInTwoFloat64) {
  MlpCase c = make_mlp(torch::kFloat64, 12);
  expect_every_split_in_two_matches(c, 1e-10);
}

TEST(AccumulatorEquivalence, MlpEverySplitInTwoFloat32) {
  MlpCase c = make_mlp(torch::kFloat32, 12);
  expect_every_split_in_two_matches(c, 1e-5);
}

TEST(AccumulatorEquivalence, GptEverySplitInTwoFloat64) {
  GptCase c = make_gpt(torch::kFloat64, 6);
  expect_every_split_in_two_matches(c, 1e-10);
}

TEST(AccumulatorEquivalence, GptEverySplitInTwoFloat32) {
  GptCase c = make_gpt(torch::kFloat32, 6);
  expect_every_split_in_two_matches(c, 1e-5);
}

TEST(AccumulatorEquivalence, UnevenMicroBatches100As32x3Plus4) {
  MlpCase c = make_mlp(torch::kFloat64, 100);
  const auto parameters = c.model->parameters();
  const torch::Tensor full = window_gradient(parameters, *c.objective, {c.batch});
  const torch::Tensor parts =
      window_gradient(parameters, *c.objective, split(c.batch, {32, 32, 32, 4}));
  EXPECT_LE(relative_difference(parts, full), 1e-10);

  // The naive rule (mean per micro-batch / accum_steps) gives a different gradient here, so this
  // test tells the two apart.
  for (const torch::Tensor& p : parameters)
    p.grad().zero_();
  for (const data::Batch& micro : split(c.batch, {32, 32, 32, 4})) {
    (c.objective->loss_sum(micro) / static_cast<double>(micro.size()) / 4.0).backward();
  }
  std::vector<torch::Tensor> naive;
  for (const torch::Tensor& p : parameters)
    naive.push_back(p.grad().flatten());
  EXPECT_GT(relative_difference(torch::cat(naive), full), 1e-3);
}

TEST(AccumulatorEquivalence, PaddingTokensCountOnlyWhereReal) {
  GptCase c = make_gpt(torch::kFloat64, 6);
  // Different amounts of padding per sample: 0, 1, ..., 5 ignored targets at the end.
  for (int64_t row = 0; row < 6; ++row) {
    c.batch.targets[row].slice(0, 8 - row, 8).fill_(-100);
  }
  const auto parameters = c.model->parameters();
  const torch::Tensor full = window_gradient(parameters, *c.objective, {c.batch});
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{1, 5}, {2, 2, 2}, {5, 1}, {3, 3}}) {
    const torch::Tensor parts = window_gradient(parameters, *c.objective, split(c.batch, sizes));
    EXPECT_LE(relative_difference(parts, full), 1e-10);
  }
  // Reference: mean over real tokens only, computed independently.
  for (const torch::Tensor& p : parameters)
    p.grad().zero_();
  const torch::Tensor logits = c.model->forward(c.batch.inputs);
  torch::nn::functional::cross_entropy(
      logits.reshape({-1, 256}), c.batch.targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100))
      .backward();
  std::vector<torch::Tensor> reference;
  for (const torch::Tensor& p : parameters)
    reference.push_back(p.grad().flatten());
  EXPECT_LE(relative_difference(full, torch::cat(reference)), 1e-12);
}

TEST(Accumulator, ReportsTrueMeanLossAndCounts) {
  GptCase c = make_gpt(torch::kFloat64, 4);
  c.batch.targets[0].slice(0, 5, 8).fill_(-100);  // 3 padding tokens
  torch::optim::SGD sgd(c.model->parameters(), torch::optim::SGDOptions(0.0));
  engine::GradientAccumulator accumulator(c.model->parameters(), sgd, nullptr,
                                          engine::AccumulatorOptions().unit(LossUnit::kToken));
  const auto parts = split(c.batch, {1, 3});
  engine::Counts window;
  for (const auto& part : parts)
    window += c.objective->count(part);
  EXPECT_EQ(window.samples, 4);
  EXPECT_EQ(window.tokens, 4 * 8 - 3);
  accumulator.begin_window(window);
  for (const auto& part : parts) {
    accumulator.backward(c.objective->loss_sum(part), c.objective->count(part));
  }
  const engine::WindowResult result = accumulator.step();
  torch::NoGradGuard no_grad;
  const double expected = c.objective->loss_sum(c.batch).item<double>() / 29.0;
  EXPECT_NEAR(result.mean_loss, expected, 1e-12);
  EXPECT_EQ(result.counts.samples, 4);
  EXPECT_EQ(result.counts.tokens, 29);
  EXPECT_EQ(result.micro_batches, 2);
  EXPECT_EQ(result.step, 1);
  for (const torch::Tensor& p : c.model->parameters())
    EXPECT_FALSE(p.grad().defined());
}

TEST(Accumulator, RejectsMicroBatchesThatDoNotAddUpToTheWindow) {
  MlpCase c = make_mlp(torch::kFloat64, 8);
  torch::optim::SGD sgd(c.model->parameters(), torch::optim::SGDOptions(0.1));
  engine::GradientAccumulator accumulator(c.model->parameters(), sgd, nullptr);
  accumulator.begin_window({8, 8});
  accumulator.backward(c.objective->loss_sum(testing::rows(c.batch, 0, 4)), {4, 4});
  try {
    accumulator.step();
    FAIL() << "expected a logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("declared 8 samples"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(accumulator.backward(c.objective->loss_sum(c.batch), {8, 8}), std::logic_error);
}

TEST(Accumulator, ClipsTheWindowGradientNotEachMicroBatch) {
  MlpCase c = make_mlp(torch::kFloat64, 16);
  const auto parameters = c.model->parameters();
  const torch::Tensor full = window_gradient(parameters, *c.objective, {c.batch});
  const double norm = full.norm().item<double>();
  const double max_norm = norm / 3.0;
  std::vector<torch::Tensor> before;
  for (const torch::Tensor& p : parameters)
    before.push_back(p.detach().clone());
  for (const torch::Tensor& p : parameters)
    p.mutable_grad().reset();

  // Plain SGD with lr 1: the update is exactly the clipped window gradient.
  torch::optim::SGD sgd(parameters, torch::optim::SGDOptions(1.0));
  engine::GradientAccumulator accumulator(parameters, sgd, nullptr,
                                          engine::AccumulatorOptions().max_grad_norm(max_norm));
  accumulator.begin_window({16, 16});
  for (const data::Batch& part : split(c.batch, {4, 4, 4, 4})) {
    accumulator.backward(c.objective->loss_sum(part), c.objective->count(part));
  }
  const engine::WindowResult result = accumulator.step();
  EXPECT_TRUE(result.clipped);
  EXPECT_NEAR(result.grad_norm, norm, 1e-12 * norm);
  std::vector<torch::Tensor> update;
  for (size_t i = 0; i < parameters.size(); ++i) {
    update.push_back((before[i] - parameters[i].detach()).flatten());
  }
  const torch::Tensor expected = full * (max_norm / (norm + 1e-6));
  EXPECT_LE(relative_difference(torch::cat(update), expected), 1e-10);
  EXPECT_NEAR(torch::cat(update).norm().item<double>(), max_norm, 1e-6);
}

/// A world of two ranks whose collectives are never reached: set_data_parallel refuses it first.
class TwoRanksNeverCalled : public dist::LocalCommunicator {
 public:
  int64_t world_size() const override { return 2; }
};

TEST(Accumulator, ManyRanksNeedAGradientReducer) {
  MlpCase c = make_mlp(torch::kFloat64, 8);
  torch::optim::SGD sgd(c.model->parameters(), torch::optim::SGDOptions(0.1));
  engine::GradientAccumulator accumulator(c.model->parameters(), sgd, nullptr);
  TwoRanksNeverCalled two;
  try {
    accumulator.set_data_parallel(&two, nullptr);
    FAIL() << "expected a logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("over 2 ranks needs a gradient reducer"),
              std::string::npos)
        << error.what();
  }
}

TEST(Accumulator, AJobOfOneRankStepsAsASingleProcess) {
  // The same two windows: alone, then with an explicit LocalCommunicator and no reducer.
  std::vector<engine::WindowResult> results;
  std::vector<torch::Tensor> weights;
  for (const bool explicit_local : {false, true}) {
    MlpCase c = make_mlp(torch::kFloat64, 8);
    torch::optim::SGD sgd(c.model->parameters(), torch::optim::SGDOptions(0.1));
    engine::GradientAccumulator accumulator(c.model->parameters(), sgd, nullptr);
    dist::LocalCommunicator local;
    if (explicit_local)
      accumulator.set_data_parallel(&local, nullptr);
    accumulator.abort_window();  // no window open: nothing happens
    for (int window = 0; window < 2; ++window) {
      accumulator.begin_window({8, 8});
      for (const data::Batch& part : split(c.batch, {3, 5}))
        accumulator.backward(c.objective->loss_sum(part), c.objective->count(part));
      results.push_back(accumulator.step());
    }
    accumulator.begin_window({8, 8});
    accumulator.backward(c.objective->loss_sum(c.batch), {8, 8});
    accumulator.abort_window();  // an abandoned window: no step, no gradient left
    EXPECT_EQ(accumulator.steps_taken(), 2);
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& p : c.model->parameters()) {
      EXPECT_FALSE(p.grad().defined());
      flat.push_back(p.detach().flatten());
    }
    weights.push_back(torch::cat(flat));
  }
  ASSERT_EQ(results.size(), 4u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i].mean_loss, results[i + 2].mean_loss);
    EXPECT_TRUE(results[i + 2].abandoned_by.empty());
    EXPECT_FALSE(results[i + 2].restarted);
  }
  EXPECT_NE(results[0].mean_loss, results[1].mean_loss);  // the first step moved the weights
  EXPECT_TRUE(torch::equal(weights[0], weights[1]));
}

TEST(Accumulator, TheReducerSeesTheBf16WeightGradientsTheFusedBlocksAddThemselves) {
  // A GPT of fused blocks under bf16 autocast, whose backward() adds its bf16 weight gradients to
  // .grad itself (nn/direct_weight_grads), trained alone and then with a reducer over a world of
  // one: its hooks copy each .grad into a bucket during the window's last backward and finish()
  // writes the sums back, so a hook that read .grad before the block added to it would lose that
  // micro-batch's gradient.
  const nn::Bf16Matmul matmul = nn::bf16_matmul();
  const nn::BlockKernel kernel = nn::block_kernel();
  nn::set_bf16_matmul(nn::Bf16Matmul::kNative);
  nn::set_block_kernel(nn::BlockKernel::kFused);
  std::vector<torch::Tensor> weights;
  std::vector<int64_t> added;
  for (const bool reduced : {false, true}) {
    GptCase c = make_gpt(torch::kFloat32, 8);
    torch::optim::SGD sgd(c.model->parameters(), torch::optim::SGDOptions(0.5));
    engine::GradientAccumulator accumulator(c.model->parameters(), sgd, nullptr);
    dist::LocalCommunicator local;
    dist::GradientReducer reducer(local, c.model->parameters());
    if (reduced)
      accumulator.set_data_parallel(&local, &reducer);
    const int64_t before = nn::direct_weight_grads_added();
    for (int window = 0; window < 3; ++window) {
      accumulator.begin_window({8, 64});
      for (const data::Batch& part : split(c.batch, {3, 5})) {
        torch::Tensor loss_sum;
        {
          const nn::AutocastGuard autocast(nn::Precision::kBf16, torch::kCPU);
          loss_sum = c.objective->loss_sum(part);
        }
        accumulator.backward(loss_sum, c.objective->count(part));
      }
      accumulator.step();
    }
    added.push_back(nn::direct_weight_grads_added() - before);
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& p : c.model->parameters())
      flat.push_back(p.detach().flatten());
    weights.push_back(torch::cat(flat));
  }
  nn::set_bf16_matmul(matmul);
  nn::set_block_kernel(kernel);
  // (2 blocks x 4 weights + the head's, a Linear on nn/bf16_linear) x 2 micro-batches x 3
  // windows, both times.
  EXPECT_EQ(added, (std::vector<int64_t>{54, 54}));
  EXPECT_TRUE(torch::equal(weights[0], weights[1]));
}

}  // namespace
}  // namespace bigbatch
