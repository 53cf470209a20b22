#include "bigbatch/memory/breakdown.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include "memory/tracker_fixture.h"

namespace bigbatch {
namespace {

using testing::TrackerTest;

TEST_F(TrackerTest, BreakdownOfAnAdamWSteppedLinear) {
  torch::manual_seed(0);
  torch::nn::Linear model(100, 100);  // 100*100 + 100 floats = 40400 bytes
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));

  const memory::MemoryBreakdown before = memory::breakdown(*model, &optimizer, 0);
  EXPECT_EQ(before.parameters, 40400);
  EXPECT_EQ(before.gradients, 40400);  // the gradients backward will create
  EXPECT_EQ(before.optimizer_state, 0);

  const int64_t peak = memory::measure_peak([&] {
    const torch::Tensor x = torch::randn({8, 100});  // (B, C)
    model->forward(x).square().mean().backward();
    optimizer.step();
  });
  const memory::MemoryBreakdown after = memory::breakdown(*model, &optimizer, 200000);
  EXPECT_EQ(after.parameters, 40400);
  EXPECT_EQ(after.gradients, 40400);
  EXPECT_EQ(after.optimizer_state, 80800);                       // exp_avg and exp_avg_sq
  EXPECT_EQ(after.activations, 200000 - 40400 - 40400 - 80800);  // 38400
  EXPECT_EQ(after.peak, 200000);
  // The step itself created the gradients and the optimizer state: at least 121200 bytes.
  EXPECT_GE(peak, 40400 + 80800);
  EXPECT_EQ(memory::breakdown(*model, &optimizer, 1000).activations, 0);  // clamped
  EXPECT_EQ(memory::breakdown(*model, nullptr, 0).optimizer_state, 0);

  // AMSGrad adds max_exp_avg_sq; SGD with momentum one buffer per parameter.
  torch::optim::AdamW amsgrad(model->parameters(), torch::optim::AdamWOptions(1e-3).amsgrad(true));
  amsgrad.step();
  EXPECT_EQ(memory::breakdown(*model, &amsgrad, 0).optimizer_state, 3 * 40400);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  sgd.step();
  EXPECT_EQ(memory::breakdown(*model, &sgd, 0).optimizer_state, 40400);
  optimizer.zero_grad();
  for (auto& p : model->parameters())
    p.mutable_grad().reset();
}

TEST_F(TrackerTest, BreakdownCountsSharedParametersOnceAndBuffers) {
  torch::nn::Module model;
  const torch::Tensor weight = model.register_parameter("weight", torch::randn({10, 10}));
  auto child = std::make_shared<torch::nn::Module>();
  child->register_parameter("tied", weight);  // one tensor under two names, as tied embeddings
  model.register_module("child", child);
  model.register_module("norm", torch::nn::BatchNorm1d(10));
  // Parameters: weight 400 bytes once, norm weight and bias 80. Buffers: running mean and
  // variance 80, num_batches_tracked 8 (int64).
  const memory::MemoryBreakdown result = memory::breakdown(model, nullptr, 0);
  EXPECT_EQ(result.parameters, 400 + 80 + 88);
  EXPECT_EQ(result.gradients, 400 + 80);
}

}  // namespace
}  // namespace bigbatch
