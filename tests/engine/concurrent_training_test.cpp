// Micro-batches of a window run concurrently (engine::ConcurrentMicroBatches): the window
// gradients, losses and weights are bitwise those of one micro-batch at a time, out-of-memory
// restarts and skipped windows included; a model that draws random numbers is refused.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/core/threads.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/concurrent_micro_batches.h"
#include "bigbatch/models/gpt.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/embedding.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/recompute.h"
#include "bigbatch/nn/weight_copies.h"
#include "engine/mlp_training_run.h"

namespace bigbatch {
namespace {

using testing::expect_identical;
using testing::RunOptions;
using testing::RunResult;
using testing::train;

/// Runs at one OpenMP and one OpenBLAS thread, as concurrent passes do, so that every kernel
/// computes the same on every thread; puts the settings back afterwards.
class ConcurrentTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    openmp_ = torch::get_num_threads();
    blas_ = blas_threads();
    apply_threads(ThreadRequest().openmp(1).blas(1));
  }
  void TearDown() override { apply_threads(ThreadRequest().openmp(openmp_).blas(blas_)); }

 private:
  int64_t openmp_ = 1;
  int64_t blas_ = 0;
};

TEST_F(ConcurrentTraining, BitwiseTheSameAsOneMicroBatchAtATime) {
  RunOptions run;
  run.dropout = 0.0;
  const RunResult one_at_a_time = train(run);
  ASSERT_EQ(one_at_a_time.sink.windows.size(), 20u);
  // 2 and 3 at a time (windows of 8 micro-batches: groups of 3, 3, 2), more than a window holds,
  // and with prefetching.
  for (const int64_t concurrent : {2, 3, 12}) {
    run.concurrent_micro_batches = concurrent;
    expect_identical(train(run), one_at_a_time, "concurrent " + std::to_string(concurrent));
  }
  run.concurrent_micro_batches = 2;
  run.prefetch_depth = 8;
  expect_identical(train(run), one_at_a_time, "concurrent 2, prefetch_depth 8");
}

TEST_F(ConcurrentTraining, SameAcrossAnOutOfMemoryRestartAndASkippedWindow) {
  RunOptions run;
  run.dropout = 0.0;
  run.oom_forward_at = 19;    // a micro-batch of step 3 (whichever thread calls 19th)
  run.inf_forward_at = {70};  // a micro-batch of step 6
  const RunResult one_at_a_time = train(run);
  ASSERT_EQ(one_at_a_time.sink.notices.size(), 2u);
  EXPECT_EQ(one_at_a_time.sink.windows[2].micro_batches, 16);
  EXPECT_TRUE(one_at_a_time.sink.windows[5].skipped);
  for (const int64_t concurrent : {2, 3}) {
    run.concurrent_micro_batches = concurrent;
    expect_identical(train(run), one_at_a_time, "concurrent " + std::to_string(concurrent));
  }
}

TEST_F(ConcurrentTraining, DropoutIsRefusedAfterItsFirstWindow) {
  RunOptions run;  // dropout 0.2
  run.concurrent_micro_batches = 2;
  const std::string message = testing::input_error_of([&] { train(run); });
  EXPECT_NE(message.find("drew random numbers (dropout?) while 2 micro-batches ran at once"),
            std::string::npos)
      << message;
}

/// y = x a + x b for a linear model with an extra parameter used twice, one unused and one
/// frozen: covers gradients summed inside a graph, undefined ones and ones not differentiated.
struct SmallModel {
  torch::Tensor a = torch::randn({3, 2}, torch::kFloat64).requires_grad_();
  torch::Tensor b = torch::randn({3, 2}, torch::kFloat64).requires_grad_();
  torch::Tensor unused = torch::randn({4}, torch::kFloat64).requires_grad_();
  torch::Tensor frozen = torch::randn({2}, torch::kFloat64);
  std::vector<torch::Tensor> parameters() const { return {a, b, unused, frozen}; }
  /// Summed loss of a (n, 3) batch: a scalar.
  torch::Tensor loss_sum(const torch::Tensor& x) const {
    const torch::Tensor y = torch::mm(x, a) + torch::mm(x, b) * b.sum() + frozen;  // (n, 2)
    return (y * y).sum();
  }
};

/// Token embeddings of a vocabulary of 50 (nn::embedding: each backward's gradient the rows
/// used, sparse where the accumulator allows) and a frozen projection.
struct EmbeddingModel {
  torch::Tensor table = torch::randn({50, 4}).requires_grad_();
  torch::Tensor projection = torch::randn({4});
  std::vector<torch::Tensor> parameters() const { return {table}; }
  /// Summed loss of (n, 3) ids: a scalar.
  torch::Tensor loss_sum(const torch::Tensor& ids, bool dense = false) const {
    const torch::Tensor x = dense ? torch::embedding(table, ids) : nn::embedding(table, ids);
    return (x.tanh() * projection).sum();
  }
};

/// The gradients of `model` after one window of `inputs` as micro-batches, each added with
/// backward() or with gradients_of() + accumulate() in order.
template <typename Model>
std::vector<torch::Tensor> window_gradients(const Model& model,
                                            const std::vector<torch::Tensor>& inputs, bool split) {
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
  engine::GradientAccumulator accumulator(model.parameters(), optimizer, nullptr);
  int64_t samples = 0;
  for (const torch::Tensor& x : inputs)
    samples += x.size(0);
  accumulator.begin_window(engine::Counts{samples, samples});
  for (const torch::Tensor& x : inputs) {
    const engine::Counts counts{x.size(0), x.size(0)};
    if (split)
      accumulator.accumulate(accumulator.gradients_of(model.loss_sum(x), counts));
    else
      accumulator.backward(model.loss_sum(x), counts);
  }
  std::vector<torch::Tensor> gradients;
  for (const torch::Tensor& parameter : model.parameters())
    gradients.push_back(parameter.grad().defined() ? parameter.grad().clone() : torch::Tensor());
  accumulator.abort_window();  // frees them for the next call
  return gradients;
}

TEST(GradientAccumulator, GradientsOfThenAccumulateInOrderEqualBackwardBitwise) {
  torch::manual_seed(3);
  const SmallModel model;
  const std::vector<torch::Tensor> inputs = {torch::randn({2, 3}, torch::kFloat64),
                                             torch::randn({4, 3}, torch::kFloat64),
                                             torch::randn({3, 3}, torch::kFloat64)};
  const std::vector<torch::Tensor> backward = window_gradients(model, inputs, false);
  const std::vector<torch::Tensor> split = window_gradients(model, inputs, true);
  ASSERT_EQ(split.size(), 4u);
  EXPECT_TRUE(torch::equal(split[0], backward[0]));
  EXPECT_TRUE(torch::equal(split[1], backward[1]));
  EXPECT_FALSE(backward[2].defined());  // unused
  EXPECT_FALSE(split[2].defined());
  EXPECT_FALSE(backward[3].defined());  // frozen
  EXPECT_FALSE(split[3].defined());
}

TEST(GradientAccumulator, AnEmbeddingsUsedRowsAddUpBitwiseEitherWayToItsDenseGradient) {
  torch::manual_seed(4);
  const EmbeddingModel model;
  // Ids repeat within and across micro-batches; most of the 50 rows are never used.
  const std::vector<torch::Tensor> inputs = {torch::tensor({{1, 7, 1}, {9, 7, 7}}),
                                             torch::tensor({{7, 2, 30}}),
                                             torch::tensor({{1, 1, 1}, {49, 0, 7}, {2, 2, 9}})};
  const std::vector<torch::Tensor> backward = window_gradients(model, inputs, false);
  const std::vector<torch::Tensor> split = window_gradients(model, inputs, true);
  ASSERT_EQ(backward.size(), 1u);
  ASSERT_EQ(split.size(), 1u);
  EXPECT_FALSE(backward[0].is_sparse());
  EXPECT_FALSE(split[0].is_sparse());
  EXPECT_TRUE(torch::equal(split[0], backward[0]));
  // LibTorch's own embedding, its dense gradient added micro-batch by micro-batch, each loss
  // divided by the window's 6 samples.
  for (const torch::Tensor& ids : inputs)
    (model.loss_sum(ids, /*dense=*/true) / 6.0).backward();
  EXPECT_LT(testing::relative_difference(backward[0], model.table.grad()), 1e-6);
  EXPECT_TRUE(torch::equal(backward[0].index({torch::tensor({3, 4, 48})}), torch::zeros({3, 4})));
}

/// A small GPT in float32 under bf16 autocast: its fused blocks' and head's weight gradients come
/// out of bf16 products.
struct Bf16Gpt {
  mutable models::Gpt gpt{models::GptOptions().vocab(32).context(12).layers(2).heads(2).embed(16)};
  std::vector<torch::Tensor> parameters() const { return gpt->parameters(); }
  /// Summed next-token loss of (n, 12) tokens: a scalar.
  torch::Tensor loss_sum(const torch::Tensor& tokens) const {
    const nn::AutocastGuard autocast(nn::Precision::kBf16, torch::kCPU);
    const torch::Tensor logits = gpt->forward(tokens.narrow(1, 0, 11));  // (n, 11, 32)
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, 32}).to(torch::kFloat), tokens.narrow(1, 1, 11).reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  }
};

TEST(GradientAccumulator, GradientsOfKeepsBf16WeightGradientsThatAccumulateWidensBitwise) {
  const nn::Bf16Matmul bf16_matmul_before = nn::bf16_matmul();
  nn::set_bf16_matmul(nn::Bf16Matmul::kNative);  // bf16 products on every CPU
  for (const bool checkpointing : {false, true}) {
    torch::manual_seed(7);
    const Bf16Gpt model;
    if (checkpointing)
      model.gpt->set_checkpointing(nn::parse_checkpoint_policy("every:1", "checkpointing"));
    const std::vector<torch::Tensor> inputs = {torch::randint(32, {3, 12}, torch::kLong),
                                               torch::randint(32, {3, 12}, torch::kLong),
                                               torch::randint(32, {2, 12}, torch::kLong)};
    const std::vector<torch::Tensor> backward = window_gradients(model, inputs, false);
    const std::vector<torch::Tensor> split = window_gradients(model, inputs, true);
    ASSERT_EQ(split.size(), backward.size());
    for (size_t i = 0; i < split.size(); ++i) {
      ASSERT_TRUE(split[i].defined()) << i;
      EXPECT_EQ(split[i].scalar_type(), torch::kFloat) << i;
      EXPECT_TRUE(torch::equal(split[i], backward[i]))
          << "parameter " << i << ", " << checkpointing;
    }

    // gradients_of hands the weights of the 2 blocks (4 each) and of the head over in bf16.
    torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
    engine::GradientAccumulator accumulator(model.parameters(), optimizer, nullptr);
    accumulator.begin_window(engine::Counts{3, 3});
    const engine::MicroBatchGradients gradients =
        accumulator.gradients_of(model.loss_sum(inputs[0]), engine::Counts{3, 3});
    int64_t kept = 0;
    for (const torch::Tensor& gradient : gradients.gradients)
      kept += gradient.defined() && gradient.scalar_type() == torch::kBFloat16 ? 1 : 0;
    EXPECT_EQ(kept, 2 * 4 + 1) << checkpointing;
    for (const torch::Tensor& parameter : model.parameters())
      EXPECT_FALSE(parameter.grad().defined());
    accumulator.abort_window();
  }
  nn::set_bf16_matmul(bf16_matmul_before);
}

TEST(GradientAccumulator, GradientsOfNeedsAnOpenWindow) {
  const SmallModel model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
  engine::GradientAccumulator accumulator(model.parameters(), optimizer, nullptr);
  const torch::Tensor x = torch::randn({2, 3}, torch::kFloat64);
  EXPECT_THROW(accumulator.gradients_of(model.loss_sum(x), engine::Counts{2, 2}), std::logic_error);
}

/// Delegates to another objective and records the threads its training forwards ran on.
class ThreadRecorder : public engine::Objective {
 public:
  explicit ThreadRecorder(engine::Objective& inner) : inner_(inner) {}
  engine::LossUnit unit() const override { return inner_.unit(); }
  engine::Counts count(const data::Batch& batch) const override { return inner_.count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      threads.insert(std::this_thread::get_id());
    }
    return inner_.loss_sum(batch);
  }
  std::set<std::thread::id> threads;

 private:
  engine::Objective& inner_;
  std::mutex mutex_;
};

/// The MLP of MlpWindow, drawn from seed 5.
models::Mlp seeded_mlp() {
  torch::manual_seed(5);
  return models::Mlp(models::MlpOptions().context(4).embed(8).hidden(32));
}

/// A small MLP with its objective, optimizer and accumulator, and a window of micro-batches of 4
/// samples each, for running passes by hand.
struct MlpWindow {
  explicit MlpWindow(int64_t micro_batches)
      : dataset(testing::random_bytes(200, 3), data::ContextDatasetOptions(4).name("train")),
        model(seeded_mlp()),
        objective(engine::forward_of(model), engine::LossUnit::kSample),
        optimizer(engine::make_optimizer(*model, engine::OptimizerOptions().lr(1e-3))),
        accumulator(model->parameters(), *optimizer, nullptr) {
    for (int64_t i = 0; i < micro_batches; ++i) {
      batches.push_back(dataset.get({4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3}));
      counts.push_back(objective.count(batches.back()));
      window += counts.back();
    }
  }
  data::ContextDataset dataset;
  models::Mlp model;
  engine::CrossEntropyObjective objective;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  engine::GradientAccumulator accumulator;
  std::vector<data::Batch> batches;
  std::vector<engine::Counts> counts;
  engine::Counts window;
};

TEST_F(ConcurrentTraining, RunsThePassesOfAGroupOnDifferentThreads) {
  MlpWindow mlp(4);
  ThreadRecorder objective(mlp.objective);
  engine::ConcurrentMicroBatches passes(3);
  EXPECT_EQ(passes.concurrency(), 3);
  mlp.accumulator.begin_window(mlp.window);
  passes.run(mlp.accumulator, objective, mlp.batches, mlp.counts);
  EXPECT_EQ(objective.threads.size(), 3u);
  EXPECT_EQ(objective.threads.count(std::this_thread::get_id()), 1u);
  const engine::WindowResult result = mlp.accumulator.step();
  EXPECT_EQ(result.micro_batches, 4);
  EXPECT_FALSE(result.skipped);
  EXPECT_GT(result.grad_norm, 0.0);
}

/// Delegates to another objective; each training forward first asks for a bf16 copy of `weight`
/// (nn::weight_copy), as the fused blocks do, and counts the copies made.
class WeightCopyCounter : public engine::Objective {
 public:
  WeightCopyCounter(engine::Objective& inner, const torch::Tensor& weight)
      : inner_(inner), weight_(weight) {}
  engine::LossUnit unit() const override { return inner_.unit(); }
  engine::Counts count(const data::Batch& batch) const override { return inner_.count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override {
    nn::weight_copy({&weight_}, torch::kBFloat16, [this] {
      ++made;
      return weight_.detach().to(torch::kBFloat16);
    });
    return inner_.loss_sum(batch);
  }
  std::atomic<int> made{0};

 private:
  engine::Objective& inner_;
  torch::Tensor weight_;
};

TEST_F(ConcurrentTraining, HelperPassesShareTheWindowsWeightCopies) {
  MlpWindow mlp(6);
  WeightCopyCounter objective(mlp.objective, mlp.model->parameters().front());
  engine::ConcurrentMicroBatches passes(3);
  for (int round = 1; round <= 2; ++round) {
    mlp.accumulator.begin_window(mlp.window);
    {
      const nn::WeightCopyScope weight_copies;  // as the trainer opens it around a window
      passes.run(mlp.accumulator, objective, mlp.batches, mlp.counts);
    }
    EXPECT_EQ(objective.made.load(), round) << "6 passes on 3 threads cast the weight once";
    mlp.accumulator.step();  // changes the weight: the next window casts it again
  }
  mlp.accumulator.begin_window(mlp.window);
  passes.run(mlp.accumulator, objective, mlp.batches, mlp.counts);  // no scope: every pass casts
  EXPECT_EQ(objective.made.load(), 2 + 6);
}

TEST(ConcurrentMicroBatches, ConcurrencyBelowOneIsAnInputError) {
  const std::string message =
      testing::input_error_of([] { engine::ConcurrentMicroBatches passes(0); });
  EXPECT_NE(message.find("concurrent micro-batches = 0 must be >= 1"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace bigbatch
