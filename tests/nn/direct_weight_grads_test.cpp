// Weight gradients added straight into .grad: only inside a DirectWeightGradScope, with the sums
// autograd's cast and add would make (bitwise), made afresh where .grad is undefined, and left to
// autograd for weights whose gradient a hook watches or whose .grad is not a plain float32 buffer.
// Inside a KeptWeightGradScope kept in bf16 instead, and widened bitwise when added later.
#include "bigbatch/nn/direct_weight_grads.h"

#include <gtest/gtest.h>

namespace bigbatch::nn {
namespace {

using torch::Tensor;

Tensor weight() {
  return torch::randn({48, 40}).requires_grad_();
}

Tensor bf16_gradient() {
  return torch::randn({48, 40}).to(torch::kBFloat16);
}

TEST(DirectWeightGrads, AddOnlyInsideTheScope) {
  torch::manual_seed(1);
  const Tensor w = weight(), first = bf16_gradient(), second = bf16_gradient();
  EXPECT_FALSE(direct_weight_grads());
  EXPECT_FALSE(add_to_weight_grad(w, first));
  EXPECT_FALSE(w.grad().defined());
  const int64_t before = direct_weight_grads_added();
  {
    const DirectWeightGradScope direct;
    const DirectWeightGradScope nested;
    EXPECT_TRUE(direct_weight_grads());
    ASSERT_TRUE(add_to_weight_grad(w, first));  // .grad undefined: made
    EXPECT_TRUE(torch::equal(w.grad(), first.to(torch::kFloat)));
    const auto version = w.grad()._version();
    ASSERT_TRUE(add_to_weight_grad(w, second));  // then added to, in place
    EXPECT_TRUE(torch::equal(w.grad(), first.to(torch::kFloat) + second.to(torch::kFloat)));
    EXPECT_GT(w.grad()._version(), version);
  }
  EXPECT_EQ(direct_weight_grads_added(), before + 2);
  EXPECT_FALSE(direct_weight_grads());
  EXPECT_FALSE(add_to_weight_grad(w, first));
}

TEST(DirectWeightGrads, SumsBitwiseAsAutogradAccumulatesOverManyMicroBatches) {
  torch::manual_seed(2);
  const Tensor direct = weight(), through_autograd = weight();
  const DirectWeightGradScope scope;
  for (int micro_batch = 0; micro_batch < 8; ++micro_batch) {
    const Tensor g = bf16_gradient() * (micro_batch + 1);
    ASSERT_TRUE(add_to_weight_grad(direct, g));
    through_autograd.backward(g.to(torch::kFloat));  // autograd's cast, then its add
  }
  EXPECT_TRUE(torch::equal(direct.grad(), through_autograd.grad()));
}

TEST(DirectWeightGrads, LeaveWatchedOrUnusualGradientsToAutograd) {
  torch::manual_seed(3);
  const Tensor g = bf16_gradient();
  const DirectWeightGradScope scope;

  const Tensor hooked = weight();
  hooked.register_hook([](const Tensor& grad) { return grad; });
  EXPECT_FALSE(add_to_weight_grad(hooked, g));

  const Tensor bf16_grad = weight();
  bf16_grad.mutable_grad() = torch::zeros({48, 40}, torch::kBFloat16);
  EXPECT_FALSE(add_to_weight_grad(bf16_grad, g));

  const Tensor strided_grad = weight();
  strided_grad.mutable_grad() = torch::zeros({40, 48}).t();
  EXPECT_FALSE(add_to_weight_grad(strided_grad, g));

  const Tensor frozen = torch::randn({48, 40});
  EXPECT_FALSE(add_to_weight_grad(frozen, g));
  EXPECT_FALSE(add_to_weight_grad(weight() * 2, g));                 // not a leaf
  EXPECT_FALSE(add_to_weight_grad(weight(), g.narrow(0, 0, 24)));    // another shape
  EXPECT_FALSE(add_to_weight_grad(weight(), g.to(torch::kFloat)));   // not bf16
  EXPECT_FALSE(add_to_weight_grad(weight().to(torch::kDouble), g));  // not float32
  EXPECT_FALSE(hooked.grad().defined());
  EXPECT_FALSE(frozen.grad().defined());
}

TEST(DirectWeightGrads, AKeptScopeKeepsEachWeightsFirstGradientAndLeavesGradAlone) {
  torch::manual_seed(4);
  const Tensor w = weight(), v = weight(), first = bf16_gradient(), second = bf16_gradient();
  const int64_t added_before = direct_weight_grads_added();
  KeptWeightGradScope kept;
  EXPECT_FALSE(direct_weight_grads());
  ASSERT_TRUE(add_to_weight_grad(w, first));
  EXPECT_FALSE(add_to_weight_grad(w, second)) << "a second gradient of w goes to autograd";
  ASSERT_TRUE(add_to_weight_grad(v, second));
  EXPECT_FALSE(add_to_weight_grad(weight().to(torch::kDouble), first));  // not float32
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(v.grad().defined());
  EXPECT_EQ(direct_weight_grads_added(), added_before);
  const auto taken = kept.take();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_TRUE(taken.at(w.unsafeGetTensorImpl()).is_same(first));
  EXPECT_TRUE(taken.at(v.unsafeGetTensorImpl()).is_same(second));
  EXPECT_TRUE(kept.take().empty());
}

TEST(DirectWeightGrads, TheInnermostScopeDecidesWhetherAGradientIsAddedOrKept) {
  torch::manual_seed(5);
  const Tensor g = bf16_gradient();
  const DirectWeightGradScope outer;
  {
    KeptWeightGradScope kept;  // a helper's backward inside an outer one
    const Tensor w = weight();
    ASSERT_TRUE(add_to_weight_grad(w, g));
    EXPECT_FALSE(w.grad().defined());
    {
      const DirectWeightGradScope inner;
      const Tensor v = weight();
      ASSERT_TRUE(add_to_weight_grad(v, g));
      EXPECT_TRUE(torch::equal(v.grad(), g.to(torch::kFloat)));
    }
    const Tensor u = weight();
    ASSERT_TRUE(add_to_weight_grad(u, g));
    EXPECT_FALSE(u.grad().defined());
    EXPECT_EQ(kept.take().size(), 2u);
  }
  const Tensor after = weight();
  ASSERT_TRUE(add_to_weight_grad(after, g));  // the outer scope adds again
  EXPECT_TRUE(torch::equal(after.grad(), g.to(torch::kFloat)));
}

TEST(DirectWeightGrads, AddWeightGradSumsBitwiseAsAutogradAccumulatesOverManyMicroBatches) {
  torch::manual_seed(6);
  const Tensor widened = weight(), strided = weight(), through_autograd = weight();
  for (int micro_batch = 0; micro_batch < 8; ++micro_batch) {
    const Tensor g = bf16_gradient() * (micro_batch + 1);
    add_weight_grad(widened, g);
    if (micro_batch == 0)
      strided.mutable_grad() = torch::zeros({40, 48}).t();  // not widenable into: ATen's add
    add_weight_grad(strided, micro_batch % 2 == 0 ? g : g.to(torch::kFloat));
    through_autograd.backward(g.to(torch::kFloat));  // autograd's cast, then its add
  }
  EXPECT_TRUE(torch::equal(widened.grad(), through_autograd.grad()));
  EXPECT_TRUE(torch::equal(strided.grad(), through_autograd.grad()));
  EXPECT_FALSE(strided.grad().is_contiguous()) << "added to in place";

  const Tensor copied = weight();
  const Tensor g = torch::randn({48, 40});
  add_weight_grad(copied, g);  // the first float32 gradient is copied, as AccumulateGrad does
  EXPECT_FALSE(copied.grad().is_same(g));
  EXPECT_TRUE(torch::equal(copied.grad(), g));
}

}  // namespace
}  // namespace bigbatch::nn
