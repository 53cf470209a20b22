// Activation checkpointing inside the ResNet with BatchNorm: exact gradients and running
// statistics updated once per forward (nn::is_recomputing).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/models/resnet.h"
#include "bigbatch/nn/norm.h"
#include "bigbatch/nn/recompute.h"
#include "nn/graph_size.h"

namespace bigbatch::nn {
namespace {

using models::ResNet;
using models::ResNetOptions;

/// What one accumulation window leaves behind.
struct Step {
  std::vector<torch::Tensor> losses;
  std::vector<torch::Tensor> grads;
  std::vector<torch::Tensor> buffers;  // running statistics and counters
};

/// Builds the same ResNet-14 (seeded), then runs forward + backward over two micro-batches with
/// the given checkpointing policy and running-statistics mode (committing the window at the end).
Step accumulate(const std::string& policy, RunningStatsMode mode, const torch::Tensor& images,
                const torch::Tensor& labels) {
  torch::manual_seed(7);
  ResNet model(ResNetOptions().depth(14).width(8).classes(5));
  model->train();
  model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
  set_running_stats_mode(*model, mode);
  Step step;
  for (int64_t i = 0; i < 2; ++i) {
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(images.narrow(0, 4 * i, 4)), labels.narrow(0, 4 * i, 4));
    loss.backward();
    step.losses.push_back(loss.detach());
  }
  commit_window(*model);
  for (const auto& param : model->parameters())
    step.grads.push_back(param.grad().clone());
  for (const auto& buffer : model->buffers())
    step.buffers.push_back(buffer.clone());
  return step;
}

TEST(ResNetCheckpoint, GradientsAndRunningStatisticsAreBitIdentical) {
  torch::manual_seed(0);
  const torch::Tensor images = torch::randn({8, 1, 12, 12});  // (B, C, H, W)
  const torch::Tensor labels = torch::randint(5, {8}, torch::kLong);
  for (const RunningStatsMode mode : {RunningStatsMode::kPerCall, RunningStatsMode::kPerWindow}) {
    const Step plain = accumulate("none", mode, images, labels);
    for (const std::string policy : {"blocks", "every:2"}) {
      SCOPED_TRACE(to_string(mode) + ", policy " + policy);
      const Step checkpointed = accumulate(policy, mode, images, labels);
      for (size_t i = 0; i < plain.losses.size(); ++i)
        EXPECT_TRUE(torch::equal(plain.losses[i], checkpointed.losses[i])) << "micro-batch " << i;
      ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
      for (size_t i = 0; i < plain.grads.size(); ++i)
        EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << "parameter " << i;
      ASSERT_EQ(plain.buffers.size(), checkpointed.buffers.size());
      for (size_t i = 0; i < plain.buffers.size(); ++i)
        EXPECT_TRUE(torch::equal(plain.buffers[i], checkpointed.buffers[i])) << "buffer " << i;
    }
    // Per call: two updates (one per micro-batch); per window: one.
    EXPECT_EQ(plain.buffers[2].item<int64_t>(), mode == RunningStatsMode::kPerCall ? 2 : 1);
  }
}

TEST(ResNetCheckpoint, RecomputeWouldOtherwiseUpdateTwice) {
  // Guards the test above: LibTorch's own BatchNorm2d inside a checkpointed block is updated by
  // the forward and again by the recompute, so the comparison can tell.
  torch::manual_seed(1);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 2, 3).padding(1));
  torch::nn::BatchNorm2d libtorch_norm(2);
  const torch::Tensor x = torch::randn({3, 2, 4, 4}).requires_grad_();
  std::vector<torch::Tensor> parameters = conv->parameters();
  for (const auto& p : libtorch_norm->parameters())
    parameters.push_back(p);
  checkpoint([&](const torch::Tensor& in) { return libtorch_norm->forward(conv->forward(in)); }, x,
             parameters)
      .sum()
      .backward();
  EXPECT_EQ(libtorch_norm->num_batches_tracked.item<int64_t>(), 2);
}

TEST(ResNetCheckpoint, GraphIsSmaller) {
  torch::manual_seed(2);
  ResNet model(ResNetOptions().depth(14).width(4));
  const torch::Tensor images = torch::randn({4, 1, 8, 8});
  std::vector<int64_t> sizes;
  for (const std::string policy : {"none", "every:2", "blocks"}) {
    model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
    sizes.push_back(testing::graph_size(model->forward(images).sum()));
  }
  EXPECT_LT(sizes[1], sizes[0]);
  EXPECT_LT(sizes[2], sizes[1]);
}

}  // namespace
}  // namespace bigbatch::nn
