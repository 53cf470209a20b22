// Activation checkpointing per layer in the Hugging Face models: the same gradients and random
// stream as without it (dropout on), and a smaller autograd graph.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/models/hf_bert.h"
#include "bigbatch/models/hf_gpt2.h"
#include "bigbatch/models/hf_llama.h"
#include "nn/graph_size.h"
#include "support/hf_fixtures.h"

namespace bigbatch::models {
namespace {

using testing::hf_dir;

/// A model under test: its module, how to set its checkpointing, and its loss on a batch.
struct Subject {
  std::shared_ptr<torch::nn::Module> module;
  std::function<void(nn::CheckpointPolicy)> set_checkpointing;
  std::function<torch::Tensor(const torch::Tensor&)> loss;
};

/// What one window of two micro-batches leaves: gradients, graph size of the first loss and the
/// next draw of the global random stream.
struct Step {
  std::vector<torch::Tensor> grads;
  int64_t graph = 0;
  torch::Tensor next_random;
};

Step window(Subject& s, const std::string& policy, const torch::Tensor& ids) {
  s.set_checkpointing(nn::parse_checkpoint_policy(policy, "policy"));
  s.module->train();
  s.module->zero_grad();
  torch::manual_seed(99);
  Step step;
  for (const auto& micro_batch : ids.chunk(2)) {
    const torch::Tensor loss = s.loss(micro_batch);
    if (step.graph == 0)
      step.graph = testing::graph_size(loss);
    loss.backward();
  }
  for (const auto& p : s.module->parameters())
    step.grads.push_back(p.grad().clone());
  step.next_random = torch::rand({4});
  return step;
}

void expect_checkpointing_exact(Subject s, const std::string& name) {
  torch::manual_seed(5);
  const torch::Tensor ids = torch::randint(1, 96, {4, 12}, torch::kLong);  // (B, T)
  const Step plain = window(s, "none", ids);
  for (const std::string policy : {"blocks", "every:2"}) {
    const Step checkpointed = window(s, policy, ids);
    ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i)
      EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << name << " " << policy;
    EXPECT_TRUE(torch::equal(plain.next_random, checkpointed.next_random)) << name << " " << policy;
    EXPECT_LT(checkpointed.graph, plain.graph) << name << " " << policy;
  }
  s.set_checkpointing(nn::CheckpointPolicy());
}

/// Next-token loss of a causal LM's logits (B, T, V) on its own inputs.
torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t time = ids.size(1);
  return torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, time - 1).reshape({-1, logits.size(-1)}),
      ids.narrow(1, 1, time - 1).reshape({-1}));
}

TEST(HfCheckpointing, Gpt2GradientsAndRandomStreamUnchanged) {
  HfGpt2 model = load_hf_gpt2(hf_dir("tiny-gpt2"));
  ASSERT_GT(model->config().resid_pdrop(), 0.0) << "the test needs dropout to be on";
  expect_checkpointing_exact(
      {model.ptr(), [model](nn::CheckpointPolicy p) mutable { model->set_checkpointing(p); },
       [model](const torch::Tensor& ids) mutable {
         return next_token_loss(model->forward(ids), ids);
       }},
      "gpt2");
}

/// expect_checkpointing_exact of the Llama-family fixture `name`, next-token loss on its ids.
void expect_llama_checkpointing_exact(const std::string& name) {
  HfLlama model = load_hf_llama(hf_dir(name));
  expect_checkpointing_exact(
      {model.ptr(), [model](nn::CheckpointPolicy p) mutable { model->set_checkpointing(p); },
       [model](const torch::Tensor& ids) mutable {
         return next_token_loss(model->forward(ids), ids);
       }},
      name);
}

TEST(HfCheckpointing, LlamaGradientsUnchanged) {
  expect_llama_checkpointing_exact("tiny-llama");
}

TEST(HfCheckpointing, Gemma3GradientsUnchanged) {
  expect_llama_checkpointing_exact("tiny-gemma3");
}

TEST(HfCheckpointing, BertGradientsAndRandomStreamUnchanged) {
  HfBert model = load_hf_bert(hf_dir("tiny-bert")).model;
  ASSERT_GT(model->config().hidden_dropout_prob(), 0.0) << "the test needs dropout to be on";
  expect_checkpointing_exact(
      {model.ptr(), [model](nn::CheckpointPolicy p) mutable { model->set_checkpointing(p); },
       [model](const torch::Tensor& ids) mutable {
         const torch::Tensor mask = torch::ones_like(ids);
         const torch::Tensor labels = ids.select(1, 0) % 3;  // (B)
         return torch::nn::functional::cross_entropy(model->forward(ids, mask), labels);
       }},
      "bert");
}

TEST(HfCheckpointing, InvalidPolicyIsRefused) {
  HfLlama model = load_hf_llama(hf_dir("tiny-llama"));
  nn::CheckpointPolicy policy;
  policy.mode = nn::CheckpointMode::kEvery;
  policy.every = 0;
  EXPECT_THROW(model->set_checkpointing(policy), InputError);
}

}  // namespace
}  // namespace bigbatch::models
