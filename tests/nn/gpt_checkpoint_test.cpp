// Activation checkpointing inside the GPT: exact gradients, untouched random stream, less graph.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/models/gpt.h"
#include "bigbatch/nn/recompute.h"
#include "nn/graph_size.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

using models::Gpt;
using models::GptOptions;

/// Three blocks, so that every:2 checkpoints blocks 0 and 2 and runs block 1 plainly.
GptOptions three_layers(double dropout) {
  return GptOptions().context(16).layers(3).heads(4).embed(32).dropout(dropout);
}

/// Mean next-token cross-entropy of `inputs` (B, T) predicting themselves shifted by one.
torch::Tensor loss_of(Gpt& model, const torch::Tensor& inputs) {
  const int64_t time = inputs.size(1);
  const torch::Tensor context = inputs.narrow(1, 0, time - 1);                // (B, T-1)
  const torch::Tensor targets = inputs.narrow(1, 1, time - 1).reshape({-1});  // (B*(T-1))
  const torch::Tensor logits = model->forward(context);                       // (B, T-1, V)
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets);
}

/// What one accumulation window leaves behind: the gradients, the losses and the next draw of
/// the global random stream.
struct Step {
  std::vector<torch::Tensor> grads;
  std::vector<torch::Tensor> losses;
  torch::Tensor next_random;
};

/// Seeds the global generator, then runs forward + backward over two micro-batches with the
/// given checkpointing policy, accumulating into .grad.
Step accumulate(Gpt& model, const std::string& policy, const torch::Tensor& batch) {
  model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
  model->zero_grad();
  torch::manual_seed(1234);
  Step step;
  for (const auto& micro_batch : batch.chunk(2)) {
    const torch::Tensor loss = loss_of(model, micro_batch);
    loss.backward();
    step.losses.push_back(loss.detach());
  }
  for (const auto& param : model->parameters())
    step.grads.push_back(param.grad().clone());
  step.next_random = torch::rand({8});
  return step;
}

TEST(GptCheckpoint, GradientsAreBitIdenticalToNoCheckpointing) {
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    for (const double dropout : {0.0, 0.1}) {
      torch::manual_seed(0);
      Gpt model(three_layers(dropout));
      model->to(dtype);
      model->train();
      const torch::Tensor batch = torch::randint(256, {4, 16}, torch::kLong);  // (B, T)
      const Step plain = accumulate(model, "none", batch);
      for (const std::string policy : {"blocks", "every:2"}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", dropout " + std::to_string(dropout) +
                     ", policy " + policy);
        const Step checkpointed = accumulate(model, policy, batch);
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

TEST(GptCheckpoint, DropoutReallyActsInTheComparison) {
  // Guards the test above: identical gradients with dropout are no accident of dropout doing
  // nothing, since another seed gives another loss.
  torch::manual_seed(0);
  Gpt model(three_layers(0.1));
  model->train();
  const torch::Tensor batch = torch::randint(256, {2, 16}, torch::kLong);
  torch::manual_seed(1234);
  const torch::Tensor first = loss_of(model, batch);
  torch::manual_seed(99);
  EXPECT_FALSE(torch::equal(first, loss_of(model, batch)));
}

TEST(GptCheckpoint, GraphIsMuchSmaller) {
  torch::manual_seed(1);
  Gpt model(three_layers(0.1));
  model->train();
  const torch::Tensor batch = torch::randint(256, {2, 16}, torch::kLong);
  std::vector<int64_t> sizes;
  for (const std::string policy : {"none", "every:2", "blocks"}) {
    model->set_checkpointing(parse_checkpoint_policy(policy, "policy"));
    sizes.push_back(testing::graph_size(loss_of(model, batch)));
  }
  // One AccumulateGrad leaf per parameter stays; the blocks' inner operations disappear.
  EXPECT_LT(sizes[1], sizes[0]);
  EXPECT_LT(sizes[2], sizes[1]);
  const int64_t leaves = int64_t(model->parameters().size());
  EXPECT_LT(2 * (sizes[2] - leaves), sizes[0] - leaves)
      << "none " << sizes[0] << ", every:2 " << sizes[1] << ", blocks " << sizes[2];
}

TEST(GptCheckpoint, EvalAndNoGradForwardsIgnoreIt) {
  torch::manual_seed(2);
  Gpt model(three_layers(0.1));
  const torch::Tensor inputs = torch::randint(256, {2, 16}, torch::kLong);
  model->eval();
  const torch::Tensor plain = model->forward(inputs);
  const int64_t plain_nodes = testing::graph_size(plain);
  model->set_checkpointing(parse_checkpoint_policy("blocks", "policy"));
  const torch::Tensor checkpointed = model->forward(inputs);
  EXPECT_TRUE(torch::equal(plain, checkpointed));
  EXPECT_EQ(testing::graph_size(checkpointed), plain_nodes);  // no checkpoint nodes in eval

  model->train();  // dropout on, but no graph: checkpointing has nothing to save
  torch::NoGradGuard no_grad;
  model->set_checkpointing(CheckpointPolicy{});
  torch::manual_seed(3);
  const torch::Tensor plain_train = model->forward(inputs);
  model->set_checkpointing(parse_checkpoint_policy("every:2", "policy"));
  torch::manual_seed(3);
  const torch::Tensor checkpointed_train = model->forward(inputs);
  EXPECT_TRUE(torch::equal(plain_train, checkpointed_train));
  EXPECT_FALSE(checkpointed_train.requires_grad());
}

TEST(GptCheckpoint, DefaultsToNoneAndRejectsAnInvalidPolicy) {
  Gpt model(three_layers(0.0));
  EXPECT_EQ(model->checkpointing().mode, CheckpointMode::kNone);
  model->set_checkpointing(parse_checkpoint_policy("every:2", "policy"));
  EXPECT_EQ(model->checkpointing().to_string(), "every:2");
  const std::string message = testing::input_error_of([&] {
    model->set_checkpointing(CheckpointPolicy{CheckpointMode::kEvery, -1});
  });
  EXPECT_NE(message.find("CheckpointPolicy.every must be >= 1, got -1"), std::string::npos)
      << message;
  EXPECT_EQ(model->checkpointing().to_string(), "every:2");  // unchanged
}

}  // namespace
}  // namespace bigbatch::nn
