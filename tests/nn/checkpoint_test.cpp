#include "bigbatch/nn/recompute.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nn/graph_size.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

/// Parameters of a small two-layer function; `unused` is deliberately never read by it.
struct SmallParams {
  torch::Tensor w1 = torch::randn({6, 8}, torch::kFloat64).requires_grad_();  // (in, hidden)
  torch::Tensor b1 = torch::randn({8}, torch::kFloat64).requires_grad_();     // (hidden)
  torch::Tensor w2 = torch::randn({8, 6}, torch::kFloat64).requires_grad_();  // (hidden, in)
  torch::Tensor unused = torch::randn({3}, torch::kFloat64).requires_grad_();

  std::vector<torch::Tensor> all() const { return {w1, b1, w2, unused}; }
  void zero_grad() {
    for (auto& p : all())
      p.mutable_grad() = torch::Tensor();
  }
};

/// x (B, 6) -> (B, 6): a residual MLP with dropout `p` on the hidden layer.
Block small_block(const SmallParams& params, double p) {
  return [&params, p](const torch::Tensor& x) {
    torch::Tensor h = torch::gelu(torch::matmul(x, params.w1) + params.b1);  // (B, 8)
    h = torch::dropout(h, p, /*train=*/p > 0.0);
    return x + torch::tanh(torch::matmul(h, params.w2));  // (B, 6)
  };
}

/// Output, input gradient and parameter gradients of one forward + backward.
struct Result {
  torch::Tensor output;
  torch::Tensor input_grad;
  std::vector<torch::Tensor> param_grads;
};

Result run(SmallParams& params, const torch::Tensor& x_value, double p, bool checkpointed) {
  params.zero_grad();
  const torch::Tensor x = x_value.clone().requires_grad_();
  const Block block = small_block(params, p);
  const std::vector<torch::Tensor> list = params.all();
  const torch::Tensor y = checkpointed ? checkpoint(block, x, list) : block(x);  // (B, 6)
  torch::rand({3});  // other random work between forward and backward moves the stream on
  (y * y).sum().backward();
  Result result{y.detach(), x.grad(), {}};
  for (const auto& param : params.all())
    result.param_grads.push_back(param.grad());
  return result;
}

void expect_identical(const Result& plain, const Result& checkpointed) {
  EXPECT_TRUE(torch::equal(plain.output, checkpointed.output));
  EXPECT_TRUE(torch::equal(plain.input_grad, checkpointed.input_grad));
  ASSERT_EQ(plain.param_grads.size(), checkpointed.param_grads.size());
  for (size_t i = 0; i < plain.param_grads.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    ASSERT_EQ(plain.param_grads[i].defined(), checkpointed.param_grads[i].defined());
    if (plain.param_grads[i].defined()) {
      EXPECT_TRUE(torch::equal(plain.param_grads[i], checkpointed.param_grads[i]));
    }
  }
}

TEST(Checkpoint, SmallFunctionGivesIdenticalOutputAndGradients) {
  torch::manual_seed(0);
  SmallParams params;
  const torch::Tensor x = torch::randn({5, 6}, torch::kFloat64);  // (B, 6)
  const Result plain = run(params, x, 0.0, false);
  const Result checkpointed = run(params, x, 0.0, true);
  expect_identical(plain, checkpointed);
  EXPECT_FALSE(checkpointed.param_grads[3].defined()) << "the unused parameter got a gradient";
}

TEST(Checkpoint, DropoutIsReplayedAndTheGlobalStreamIsUnaffected) {
  torch::manual_seed(1);
  SmallParams params;
  const torch::Tensor x = torch::randn({64, 6}, torch::kFloat64);  // (B, 6)
  torch::manual_seed(7);
  const Result plain = run(params, x, 0.5, false);
  const torch::Tensor plain_next = torch::rand({16});
  torch::manual_seed(7);
  const Result checkpointed = run(params, x, 0.5, true);
  const torch::Tensor checkpointed_next = torch::rand({16});
  expect_identical(plain, checkpointed);
  EXPECT_TRUE(torch::equal(plain_next, checkpointed_next));
}

TEST(Checkpoint, RecomputesOnceDuringBackward) {
  torch::manual_seed(2);
  const torch::Tensor w = torch::randn({4, 4}).requires_grad_();
  int calls = 0;
  const Block block = [&](const torch::Tensor& x) {
    ++calls;
    return torch::relu(torch::matmul(x, w));
  };
  const torch::Tensor y = checkpoint(block, torch::randn({2, 4}), {w});
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(w.grad().defined());
}

TEST(Checkpoint, WithoutGradModeOrGradientsItIsAPlainCall) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({4, 4}).requires_grad_();
  const torch::Tensor x = torch::randn({2, 4});
  int calls = 0;
  const Block block = [&](const torch::Tensor& in) {
    ++calls;
    return torch::matmul(in, w);
  };
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor y = checkpoint(block, x, {w});
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    EXPECT_TRUE(torch::equal(y, torch::matmul(x, w)));
  }
  const torch::Tensor frozen = w.detach();
  const torch::Tensor z = checkpoint([&](const torch::Tensor& in) { return in * 2; }, x, {frozen});
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(calls, 1);
}

TEST(Checkpoint, GradientReachesParametersWhenTheInputNeedsNone) {
  torch::manual_seed(4);
  const torch::Tensor w = torch::randn({4, 3}, torch::kFloat64).requires_grad_();
  const torch::Tensor x = torch::randn({2, 4}, torch::kFloat64);  // requires no grad
  const Block block = [&](const torch::Tensor& in) { return torch::sin(torch::matmul(in, w)); };
  block(x).sum().backward();
  const torch::Tensor plain = w.grad().clone();
  w.mutable_grad() = torch::Tensor();
  checkpoint(block, x, {w}).sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), plain));
}

TEST(Checkpoint, AnUnlistedParameterIsReportedAtBackward) {
  torch::manual_seed(5);
  const torch::Tensor listed = torch::randn({4, 4}).requires_grad_();
  const torch::Tensor forgotten = torch::randn({4}).requires_grad_();
  const torch::Tensor x = torch::randn({2, 4}).requires_grad_();
  const Block block = [&](const torch::Tensor& in) {
    return torch::matmul(in, listed) + forgotten;
  };
  const torch::Tensor y = checkpoint(block, x, {listed});
  try {
    y.sum().backward();
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("not in `parameters`"), std::string::npos)
        << error.what();
  }
}

TEST(Checkpoint, AParameterChangedBeforeBackwardIsReported) {
  torch::manual_seed(6);
  const torch::Tensor w = torch::randn({4, 4}).requires_grad_();
  const torch::Tensor y = checkpoint([&](const torch::Tensor& in) { return torch::matmul(in, w); },
                                     torch::randn({2, 4}).requires_grad_(), {w});
  {
    torch::NoGradGuard no_grad;
    w.add_(1.0);  // an optimizer step between forward and backward
  }
  EXPECT_THROW(y.sum().backward(), c10::Error);
}

TEST(Checkpoint, KeepsOneGraphNodePerCheckpointedBlock) {
  torch::manual_seed(7);
  SmallParams params;
  const Block block = small_block(params, 0.0);
  const std::vector<torch::Tensor> list = params.all();
  const torch::Tensor x = torch::randn({5, 6}, torch::kFloat64).requires_grad_();
  torch::Tensor plain = x;
  torch::Tensor checkpointed = x;
  for (int i = 0; i < 4; ++i) {
    plain = block(plain);
    checkpointed = checkpoint(block, checkpointed, list);
  }
  const int64_t plain_nodes = testing::graph_size(plain.sum());
  const int64_t checkpointed_nodes = testing::graph_size(checkpointed.sum());
  // Each checkpointed block is one node; the leaves (x, w1, b1, w2, unused) and sum remain.
  EXPECT_EQ(checkpointed_nodes, 1 + 4 + 5);
  // Plainly, each block is at least 5 nodes (mm, add, gelu, mm, tanh, add), plus sum and the 4
  // leaves it uses.
  EXPECT_GE(plain_nodes, 1 + 4 * 5 + 4);
}

TEST(CheckpointPolicy, ParsesTheDocumentedForms) {
  EXPECT_EQ(parse_checkpoint_policy("none", "f").mode, CheckpointMode::kNone);
  EXPECT_EQ(parse_checkpoint_policy("blocks", "f").mode, CheckpointMode::kBlocks);
  const CheckpointPolicy every = parse_checkpoint_policy("every:3", "f");
  EXPECT_EQ(every.mode, CheckpointMode::kEvery);
  EXPECT_EQ(every.every, 3);
  EXPECT_EQ(parse_checkpoint_policy("every:1", "f").every, 1);
  for (const std::string text : {"none", "blocks", "every:1", "every:12"})
    EXPECT_EQ(parse_checkpoint_policy(text, "f").to_string(), text);
}

TEST(CheckpointPolicy, RejectsOtherTextNamingFieldTextAndForms) {
  for (const std::string text :
       {"", "None", "block", "every", "every:", "every:0", "every:-2", "every:2x", "every: 2",
        "every:+2", "every:99999999999999999999", "all"}) {
    SCOPED_TRACE("text '" + text + "'");
    const std::string message =
        testing::input_error_of([&] { parse_checkpoint_policy(text, "train.checkpointing"); });
    const std::vector<std::string> parts = {
        "train.checkpointing", "\"" + text + "\"", "none", "blocks", "every:N", "N >= 1"};
    for (const auto& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

TEST(CheckpointPolicy, AppliesToTheChosenBlocks) {
  const CheckpointPolicy every3 = parse_checkpoint_policy("every:3", "f");
  std::vector<int64_t> chosen;
  for (int64_t i = 0; i < 10; ++i) {
    if (every3.applies_to(i))
      chosen.push_back(i);
  }
  EXPECT_EQ(chosen, (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_FALSE(CheckpointPolicy{}.applies_to(0));
  EXPECT_TRUE((CheckpointPolicy{CheckpointMode::kBlocks, 1}.applies_to(5)));
  const std::string message = testing::input_error_of([] {
    CheckpointPolicy{CheckpointMode::kEvery, 0}.applies_to(1);
  });
  EXPECT_NE(message.find("CheckpointPolicy.every must be >= 1, got 0"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace bigbatch::nn
