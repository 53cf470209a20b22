// The GPT and the BERT give the same logits and gradients with the fused attention kernel as
// with the composite one (float64), under their causal and padding masks. (With dropout they
// differ: each kernel draws its masks in its own way.)
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "bigbatch/models/bert.h"
#include "bigbatch/models/gpt.h"
#include "bigbatch/nn/attention.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

/// Logits and the flattened parameter gradient of one forward + backward with `kernel`.
struct Pass {
  torch::Tensor logits, grads;
};

Pass run(nn::AttentionKernel kernel, torch::nn::Module& model,
         const std::function<torch::Tensor()>& forward) {
  const nn::AttentionKernel before = nn::attention_kernel();
  nn::set_attention_kernel(kernel, "test");
  model.zero_grad();
  const torch::Tensor logits = forward();
  logits.square().sum().backward();
  nn::set_attention_kernel(before, "test");
  std::vector<torch::Tensor> grads;
  for (const auto& p : model.parameters())
    grads.push_back(p.grad().flatten());
  return {logits.detach(), torch::cat(grads)};
}

void expect_same_with_both_kernels(torch::nn::Module& model,
                                   const std::function<torch::Tensor()>& forward) {
  if (!nn::fused_attention_available())
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused attention (2.0 and later do)";
  const Pass fused = run(nn::AttentionKernel::kFused, model, forward);
  const Pass composite = run(nn::AttentionKernel::kComposite, model, forward);
  EXPECT_LE(testing::relative_difference(fused.logits, composite.logits), 1e-13);
  EXPECT_LE(testing::relative_difference(fused.grads, composite.grads), 1e-12);
  EXPECT_GT(composite.grads.abs().max().item<double>(), 0.0);
}

TEST(AttentionKernels, GptIsTheSameWithEither) {
  torch::manual_seed(2);
  Gpt model(GptOptions().context(16).layers(2).heads(4).embed(32));
  model->to(torch::kFloat64);
  const torch::Tensor inputs = torch::randint(256, {3, 16}, torch::kLong);
  expect_same_with_both_kernels(*model, [&] { return model->forward(inputs); });
}

TEST(AttentionKernels, BertWithPaddingIsTheSameWithEither) {
  torch::manual_seed(3);
  const int64_t pad = 256;
  // No dropout: the two kernels draw their dropout masks differently.
  Bert model(
      BertOptions().context(12).layers(2).heads(4).embed(32).classes(3).pad_id(pad).dropout(0.0));
  model->to(torch::kFloat64);
  torch::Tensor inputs = torch::randint(256, {3, 12}, torch::kLong);
  inputs.index_put_({1, torch::indexing::Slice(5)}, pad);  // 5 real bytes, 7 of padding
  inputs.index_put_({2, torch::indexing::Slice(11)}, pad);
  expect_same_with_both_kernels(*model, [&] { return model->forward(inputs); });
}

}  // namespace
}  // namespace bigbatch::models
