// Activation checkpointing inside the BERT-style encoder: exact gradients with dropout and a
// padding mask captured by the checkpointed blocks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/models/bert.h"
#include "bigbatch/nn/recompute.h"
#include "nn/graph_size.h"

namespace bigbatch::nn {
namespace {

using models::Bert;
using models::BertOptions;

/// Three blocks, so that every:2 checkpoints blocks 0 and 2 and runs block 1 plainly.
BertOptions three_layers(double dropout) {
  return BertOptions().context(16).layers(3).heads(4).embed(32).classes(4).dropout(dropout);
}

/// (B, 16) random bytes, row b padded after 16 - 3b tokens.
torch::Tensor padded_inputs(int64_t batch) {
  torch::Tensor inputs = torch::randint(256, {batch, 16}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b)
    inputs.index_put_({b, torch::indexing::Slice(16 - 3 * b, torch::indexing::None)}, 256);
  return inputs;
}

/// What one accumulation window leaves behind.
struct Step {
  std::vector<torch::Tensor> grads;
  std::vector<torch::Tensor> losses;
  torch::Tensor next_random;
};

/// Seeds the global generator, then runs forward + backward over two micro-batches.
Step accumulate(Bert& model, const std::string& policy, const torch::Tensor& inputs,
                const torch::Tensor& labels) {
  model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
  model->zero_grad();
  torch::manual_seed(1234);
  Step step;
  for (int64_t i = 0; i < 2; ++i) {
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(inputs.narrow(0, 2 * i, 2)), labels.narrow(0, 2 * i, 2));
    loss.backward();
    step.losses.push_back(loss.detach());
  }
  for (const auto& param : model->parameters())
    step.grads.push_back(param.grad().clone());
  step.next_random = torch::rand({8});
  return step;
}

TEST(BertCheckpoint, GradientsAreBitIdenticalToNoCheckpointing) {
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    for (const double dropout : {0.0, 0.1}) {
      torch::manual_seed(0);
      Bert model(three_layers(dropout));
      model->to(dtype);
      model->train();
      const torch::Tensor inputs = padded_inputs(4);                      // (B, T)
      const torch::Tensor labels = torch::randint(4, {4}, torch::kLong);  // (B)
      const Step plain = accumulate(model, "none", inputs, labels);
      for (const std::string policy : {"blocks", "every:2"}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", dropout " + std::to_string(dropout) +
                     ", policy " + policy);
        const Step checkpointed = accumulate(model, policy, inputs, labels);
        for (size_t i = 0; i < plain.losses.size(); ++i)
          EXPECT_TRUE(torch::equal(plain.losses[i], checkpointed.losses[i])) << "micro-batch " << i;
        const auto names = model->named_parameters().keys();
        ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
        for (size_t i = 0; i < plain.grads.size(); ++i)
          EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << names[i];
        EXPECT_TRUE(torch::equal(plain.next_random, checkpointed.next_random));
      }
    }
  }
}

TEST(BertCheckpoint, DropoutReallyActsInTheComparison) {
  torch::manual_seed(0);
  Bert model(three_layers(0.1));
  model->train();
  const torch::Tensor inputs = padded_inputs(2);
  torch::manual_seed(1234);
  const torch::Tensor first = model->forward(inputs);
  torch::manual_seed(99);
  EXPECT_FALSE(torch::equal(first, model->forward(inputs)));
}

TEST(BertCheckpoint, GraphIsSmallerAndEvalIgnoresIt) {
  torch::manual_seed(1);
  Bert model(three_layers(0.1));
  const torch::Tensor inputs = padded_inputs(2);
  std::vector<int64_t> sizes;
  for (const std::string policy : {"none", "every:2", "blocks"}) {
    model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
    sizes.push_back(testing::graph_size(model->forward(inputs).sum()));
  }
  EXPECT_LT(sizes[1], sizes[0]);
  EXPECT_LT(sizes[2], sizes[1]);

  model->eval();
  model->set_checkpointing(CheckpointPolicy{});
  const torch::Tensor plain = model->forward(inputs);
  model->set_checkpointing(parse_checkpoint_policy("blocks", "policy"));
  EXPECT_TRUE(torch::equal(plain, model->forward(inputs)));
}

}  // namespace
}  // namespace bigbatch::nn
