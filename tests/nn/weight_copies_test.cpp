// The fused blocks' kept weight copies: one per scope while the weight is unchanged, afresh after
// an in-place change or outside a scope, never of tensors that are not parameters, freed with the
// outermost scope; shared with scopes on other threads opened with them.
#include "bigbatch/nn/weight_copies.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

namespace bigbatch::nn {
namespace {

torch::Tensor parameter() {
  torch::manual_seed(1);
  return torch::randn({4, 3}).requires_grad_();
}

TEST(WeightCopies, OutsideAScopeEveryCallCasts) {
  const torch::Tensor weight = parameter();
  EXPECT_FALSE(weight_copies_kept());
  const torch::Tensor first = weight_in_dtype(weight, torch::kBFloat16);
  const torch::Tensor second = weight_in_dtype(weight, torch::kBFloat16);
  EXPECT_NE(first.data_ptr(), second.data_ptr());
  EXPECT_TRUE(torch::equal(first, weight.detach().to(torch::kBFloat16)));
  EXPECT_TRUE(weight_in_dtype(weight, torch::kFloat).is_same(weight));  // already in the dtype
}

TEST(WeightCopies, AScopeKeepsOneCopyUntilTheWeightChanges) {
  torch::Tensor weight = parameter();
  const WeightCopyScope scope;
  EXPECT_TRUE(weight_copies_kept());
  const torch::Tensor first = weight_in_dtype(weight, torch::kBFloat16);
  EXPECT_EQ(weight_in_dtype(weight, torch::kBFloat16).data_ptr(), first.data_ptr());
  EXPECT_NE(weight_in_dtype(weight, torch::kDouble).data_ptr(), first.data_ptr());  // per dtype
  {
    const torch::NoGradGuard no_grad;
    weight.add_(1.0);  // an optimizer's in-place step bumps the version
  }
  const torch::Tensor after = weight_in_dtype(weight, torch::kBFloat16);
  EXPECT_NE(after.data_ptr(), first.data_ptr());
  EXPECT_TRUE(torch::equal(after, weight.detach().to(torch::kBFloat16)));
}

TEST(WeightCopies, KeepsNoCopyOfTensorsThatAreNotParameters) {
  const torch::Tensor weight = parameter();
  const WeightCopyScope scope;
  const torch::Tensor computed = weight * 2;       // not a leaf
  const torch::Tensor detached = weight.detach();  // a leaf without a gradient
  for (const torch::Tensor* t : {&computed, &detached}) {
    const torch::Tensor first = weight_in_dtype(*t, torch::kBFloat16);
    EXPECT_NE(weight_in_dtype(*t, torch::kBFloat16).data_ptr(), first.data_ptr());
  }
}

TEST(WeightCopies, StackedSourcesAreMadeOnceAndTheOutermostScopeFreesThem) {
  const torch::Tensor a = parameter(), b = parameter() * 1;  // b: not a leaf
  const torch::Tensor c = torch::ones({4, 3}).requires_grad_();
  int made = 0;
  const auto stack = [&] {
    ++made;
    return torch::cat({a, c}).detach().to(torch::kBFloat16);
  };
  torch::Tensor kept;
  {
    const WeightCopyScope outer;
    {
      const WeightCopyScope inner;
      kept = weight_copy({&a, &c}, torch::kBFloat16, stack);
    }
    EXPECT_TRUE(weight_copies_kept());  // the inner scope's end keeps the outer one's copies
    EXPECT_TRUE(weight_copy({&a, &c}, torch::kBFloat16, stack).is_same(kept));
    EXPECT_EQ(made, 1);
    weight_copy({&a, &b}, torch::kBFloat16, stack);  // a source that is not a parameter
    weight_copy({&a, &b}, torch::kBFloat16, stack);
    EXPECT_EQ(made, 3);
  }
  EXPECT_FALSE(weight_copies_kept());
  EXPECT_EQ(kept.use_count(), 1);  // the scope let go of it
  weight_copy({&a, &c}, torch::kBFloat16, stack);
  EXPECT_EQ(made, 4);
}

TEST(WeightCopies, AScopeOnAnotherThreadSharesTheCopiesUntilTheLastScopeEnds) {
  const torch::Tensor weight = parameter(), other = parameter();
  int made = 0;
  const auto cast = [&] {
    ++made;
    return weight.detach().to(torch::kBFloat16);
  };
  EXPECT_EQ(shared_weight_copies(), nullptr);  // no scope open
  std::shared_ptr<KeptWeightCopies> shared;
  torch::Tensor mine, theirs, helpers_own;
  {
    const WeightCopyScope scope;
    shared = shared_weight_copies();
    ASSERT_NE(shared, nullptr);
    mine = weight_copy({&weight}, torch::kBFloat16, cast);
    std::thread helper([&] {
      const WeightCopyScope on_helper(shared);
      EXPECT_TRUE(weight_copies_kept());
      theirs = weight_copy({&weight}, torch::kBFloat16, cast);  // the copy made on the other thread
      helpers_own = weight_in_dtype(other, torch::kBFloat16);   // kept for both threads
    });
    helper.join();
    EXPECT_TRUE(weight_in_dtype(other, torch::kBFloat16).is_same(helpers_own));
    {
      const WeightCopyScope nested(nullptr);  // nested: still the outermost scope's copies
      EXPECT_TRUE(weight_copy({&weight}, torch::kBFloat16, cast).is_same(mine));
    }
  }
  EXPECT_EQ(made, 1);
  EXPECT_TRUE(theirs.is_same(mine));
  EXPECT_EQ(shared_weight_copies(), nullptr);
  EXPECT_EQ(mine.use_count(), 3);  // mine, theirs and the copies `shared` still holds
  shared.reset();                  // the last holder: the copies are freed
  EXPECT_EQ(mine.use_count(), 2);
}

}  // namespace
}  // namespace bigbatch::nn
