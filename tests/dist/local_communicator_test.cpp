// dist/local_communicator: a single process as a job of one rank.
#include "bigbatch/dist/local_communicator.h"

#include <gtest/gtest.h>

namespace bigbatch::dist {
namespace {

TEST(LocalCommunicator, EveryCollectiveLeavesTheTensorsAsTheyAre) {
  LocalCommunicator local;
  EXPECT_EQ(local.rank(), 0);
  EXPECT_EQ(local.world_size(), 1);
  torch::Tensor values = torch::tensor({1.5, -2.0, 3.25}, torch::kFloat64);
  const torch::Tensor before = values.clone();
  local.all_reduce(values, Traffic::kGradients, "a sum over one rank");
  EXPECT_TRUE(torch::equal(values, before));
  local.broadcast(values, 0, "a broadcast from the only rank");
  EXPECT_TRUE(torch::equal(values, before));
  const std::vector<torch::Tensor> gathered = local.all_gather(values, "a gather of one rank");
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(torch::equal(gathered[0], before));
  EXPECT_NE(gathered[0].data_ptr(), values.data_ptr());  // a copy, as a real gather gives
  EXPECT_TRUE(local.any(true, "a flag"));
  EXPECT_FALSE(local.any(false, "a flag"));
  EXPECT_EQ(local.stats().gradients.calls + local.stats().control.calls, 0);
  EXPECT_THROW(local.broadcast(values, 1, "a broadcast from a rank that is not there"),
               std::logic_error);
}

TEST(LocalCommunicator, ModuleCollectivesChangeNoWeight) {
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  model->train();
  model->forward(torch::randn({8, 4}));  // running statistics that are not their initial values
  std::vector<torch::Tensor> before;
  for (const torch::Tensor& t : model->parameters())
    before.push_back(t.detach().clone());
  for (const torch::Tensor& t : model->buffers())
    before.push_back(t.detach().clone());
  LocalCommunicator local;
  broadcast_module(local, *model);
  average_buffers(local, *model);
  size_t i = 0;
  for (const torch::Tensor& t : model->parameters())
    EXPECT_TRUE(torch::equal(t, before[i++]));
  for (const torch::Tensor& t : model->buffers())
    EXPECT_TRUE(torch::equal(t, before[i++]));
}

}  // namespace
}  // namespace bigbatch::dist
