// Activation checkpointing under bf16 autocast: the recompute runs under the forward's autocast
// settings, so gradients are bit-identical to a plain call under autocast.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/models/gpt.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::nn {
namespace {

/// The gradients of one bf16 forward (under AutocastGuard) + fp32 backward (outside it).
std::vector<torch::Tensor> bf16_gradients(models::Gpt& model, const std::string& policy,
                                          const torch::Tensor& inputs) {
  model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
  model->zero_grad();
  torch::manual_seed(77);  // the same dropout masks for every policy
  torch::Tensor loss;
  {
    AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    const torch::Tensor logits = model->forward(inputs);  // (B, T, V)
    EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
    loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                inputs.reshape({-1}));
  }
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& parameter : model->parameters()) {
    EXPECT_EQ(parameter.grad().scalar_type(), torch::kFloat);
    grads.push_back(parameter.grad().clone());
  }
  return grads;
}

TEST(CheckpointAutocast, Bf16GradientsAreBitIdenticalToThePlainModel) {
  for (const double dropout : {0.0, 0.1}) {
    torch::manual_seed(0);
    models::Gpt model(
        models::GptOptions().context(16).layers(3).heads(4).embed(32).dropout(dropout));
    model->train();
    const torch::Tensor inputs = torch::randint(256, {4, 16}, torch::kLong);  // (B, T)
    const std::vector<torch::Tensor> plain = bf16_gradients(model, "none", inputs);
    for (const std::string policy : {"blocks", "every:2"}) {
      SCOPED_TRACE("dropout " + std::to_string(dropout) + ", policy " + policy);
      const std::vector<torch::Tensor> checkpointed = bf16_gradients(model, policy, inputs);
      const auto names = model->named_parameters().keys();
      ASSERT_EQ(plain.size(), checkpointed.size());
      for (size_t i = 0; i < plain.size(); ++i)
        EXPECT_TRUE(torch::equal(plain[i], checkpointed[i])) << names[i];
    }
  }
}

TEST(CheckpointAutocast, RecomputeIgnoresTheAutocastStateOfBackward) {
  // A block whose forward ran without autocast is recomputed without it even when backward is
  // called inside an autocast region; whatever autocast does to the backward ops themselves, it
  // does the same to a plain call, so the gradients must be equal.
  torch::manual_seed(1);
  torch::nn::Linear linear(16, 16);
  const torch::Tensor x = torch::randn({4, 16});
  const auto block = [&](const torch::Tensor& input) { return linear->forward(input).tanh(); };
  const auto weight_gradient = [&](const torch::Tensor& y) {
    linear->zero_grad();
    AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    y.sum().backward();
    return linear->weight.grad().clone();
  };
  const torch::Tensor expected = weight_gradient(block(x));
  const torch::Tensor checkpointed = weight_gradient(checkpoint(block, x, linear->parameters()));
  EXPECT_TRUE(torch::equal(checkpointed, expected));
}

}  // namespace
}  // namespace bigbatch::nn
