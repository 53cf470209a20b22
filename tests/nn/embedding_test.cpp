// nn::embedding: LibTorch's embedding forward, and a gradient of the rows used that is dense or
// sparse as this thread's SparseEmbeddingGrad allows, adding into .grad to the same values either
// way over many backwards.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/nn/embedding.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

/// A table of 40 rows of 5, requiring grad.
torch::Tensor random_table(torch::ScalarType dtype = torch::kFloat) {
  torch::manual_seed(7);
  return torch::randn({40, 5}, torch::dtype(dtype)).requires_grad_();
}

/// Ids (2, 4) with repeats, most rows unused.
torch::Tensor example_ids() {
  return torch::tensor({{3, 17, 3, 0}, {39, 3, 17, 8}});
}

/// A weighted sum of the looked-up rows: its gradient differs per position.
torch::Tensor loss_of(const torch::Tensor& rows) {
  const torch::Tensor weights =
      torch::linspace(-1.0, 2.0, rows.numel(), rows.options()).view(rows.sizes());
  return (rows * weights).sum();
}

TEST(Embedding, ForwardAndDenseGradientAreLibTorchs) {
  const torch::Tensor table = random_table(torch::kDouble);
  const torch::Tensor ids = example_ids();
  const torch::Tensor ours = nn::embedding(table, ids);
  const torch::Tensor theirs = torch::embedding(table, ids);
  EXPECT_TRUE(torch::equal(ours, theirs));
  EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{2, 4, 5}));
  const torch::Tensor grad = torch::autograd::grad({loss_of(ours)}, {table})[0];
  const torch::Tensor expected = torch::autograd::grad({loss_of(theirs)}, {table})[0];
  EXPECT_FALSE(grad.is_sparse());  // kNever by default
  EXPECT_LT(testing::relative_difference(grad, expected), 1e-15);
}

TEST(Embedding, ReturnsTheUsedRowsCoalescedWhereAllowed) {
  const torch::Tensor table = random_table();
  const torch::Tensor dense =
      torch::autograd::grad({loss_of(nn::embedding(table, example_ids()))}, {table})[0];
  const SparseEmbeddingGradScope always(SparseEmbeddingGrad::kAlways);
  EXPECT_EQ(sparse_embedding_grad(), SparseEmbeddingGrad::kAlways);
  const torch::Tensor sparse =
      torch::autograd::grad({loss_of(nn::embedding(table, example_ids()))}, {table})[0];
  ASSERT_TRUE(sparse.is_sparse());
  EXPECT_TRUE(sparse.is_coalesced());
  EXPECT_TRUE(torch::equal(sparse._indices(), torch::tensor({{0, 3, 8, 17, 39}})));
  EXPECT_TRUE(torch::equal(sparse.to_dense(), dense));
}

TEST(Embedding, AddsIntoADenseGradOverManyBackwardsAsDenseGradientsDo) {
  const torch::Tensor sparse_table = random_table();
  const torch::Tensor dense_table = random_table();
  for (int64_t step = 0; step < 6; ++step) {
    const torch::Tensor ids = torch::randint(40, {3, 5}, torch::kLong);
    {
      const SparseEmbeddingGradScope into(SparseEmbeddingGrad::kIntoDenseGrad);
      loss_of(nn::embedding(sparse_table, ids)).backward();
    }
    loss_of(nn::embedding(dense_table, ids)).backward();
    ASSERT_FALSE(sparse_table.grad().is_sparse()) << step;
    EXPECT_TRUE(torch::equal(sparse_table.grad(), dense_table.grad())) << step;
  }
  EXPECT_EQ(sparse_embedding_grad(), SparseEmbeddingGrad::kNever);  // the scopes ended
}

TEST(Embedding, StaysDenseWhereTheGradCannotTakeRows) {
  const SparseEmbeddingGradScope into(SparseEmbeddingGrad::kIntoDenseGrad);
  const torch::Tensor table = random_table();
  // No .grad yet: the first gradient becomes it, dense.
  EXPECT_FALSE(torch::autograd::grad({loss_of(nn::embedding(table, example_ids()))}, {table})[0]
                   .is_sparse());
  table.mutable_grad() = torch::zeros({40, 5}, torch::kDouble);  // another dtype
  EXPECT_FALSE(torch::autograd::grad({loss_of(nn::embedding(table, example_ids()))}, {table})[0]
                   .is_sparse());
  table.mutable_grad() = torch::zeros({40, 5});
  EXPECT_TRUE(torch::autograd::grad({loss_of(nn::embedding(table, example_ids()))}, {table})[0]
                  .is_sparse());
}

TEST(Embedding, WithoutGradientsIsLibTorchsEmbeddingAndRefusesBadInputs) {
  const torch::Tensor table = random_table();
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(nn::embedding(table, example_ids()).requires_grad());
  }
  EXPECT_TRUE(torch::equal(nn::embedding(table.detach(), example_ids().to(torch::kInt)),
                           torch::embedding(table.detach(), example_ids())));
  const std::string flat = testing::input_error_of([&] { nn::embedding(table[0], example_ids()); });
  EXPECT_NE(flat.find("must be (V, C), got [5]"), std::string::npos) << flat;
  const std::string floats =
      testing::input_error_of([&] { nn::embedding(table, example_ids().to(torch::kFloat)); });
  EXPECT_NE(floats.find("ids must be int64 or int32, got Float"), std::string::npos) << floats;
}

}  // namespace
}  // namespace bigbatch::nn
