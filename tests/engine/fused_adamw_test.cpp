// The fused AdamW against LibTorch's: the same updates over many steps, the same state (a
// checkpoint of one continues in the other), parameters without a gradient left alone, and the
// choice of kernel.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/engine/fused_adamw.h"
#include "bigbatch/engine/optimizer.h"
#include "support/test_support.h"

namespace bigbatch::engine {
namespace {

/// Two groups over float64 parameters (one decayed, one not) and one optimizer over them.
struct AdamWRun {
  std::vector<torch::Tensor> decayed, plain;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

AdamWRun make_run(OptimizerKernel kernel) {
  torch::manual_seed(5);
  AdamWRun s;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  s.decayed = {torch::randn({6, 4}, options).requires_grad_(),
               torch::randn({3, 5}, options).requires_grad_()};
  s.plain = {torch::randn({7}, options).requires_grad_()};
  const auto group = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.99}).eps(1e-8);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(s.decayed, std::make_unique<torch::optim::AdamWOptions>(
                                     torch::optim::AdamWOptions(group).weight_decay(0.1)));
  groups.emplace_back(s.plain, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(group).weight_decay(0.0)));
  if (kernel == OptimizerKernel::kFused)
    s.optimizer = std::make_unique<FusedAdamW>(std::move(groups), group);
  else
    s.optimizer = std::make_unique<torch::optim::AdamW>(std::move(groups), group);
  return s;
}

/// Gives every parameter a gradient of step `step` (the same for both setups), except the second
/// decayed one on every third step, and steps at learning rate 3e-3 / (1 + step).
void run_steps(AdamWRun& s, int64_t first, int64_t last) {
  for (int64_t step = first; step < last; ++step) {
    torch::manual_seed(100 + step);
    std::vector<torch::Tensor> all = s.decayed;
    all.insert(all.end(), s.plain.begin(), s.plain.end());
    for (size_t i = 0; i < all.size(); ++i) {
      const torch::Tensor grad = torch::randn(all[i].sizes(), all[i].options());
      if (i == 1 && step % 3 == 0)
        all[i].mutable_grad() = torch::Tensor();
      else
        all[i].mutable_grad() = grad;
    }
    set_learning_rate(*s.optimizer, 3e-3 / double(1 + step));
    s.optimizer->step();
  }
}

void expect_same_parameters(const AdamWRun& a, const AdamWRun& b, double tolerance) {
  for (size_t i = 0; i < a.decayed.size(); ++i)
    EXPECT_LE(testing::relative_difference(a.decayed[i], b.decayed[i]), tolerance) << i;
  EXPECT_LE(testing::relative_difference(a.plain[0], b.plain[0]), tolerance);
}

class FusedAdamWTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!compat::kHasFusedAdamW)
      GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused AdamW for the CPU (2.4 and "
                   << "later do)";
  }
};

TEST_F(FusedAdamWTest, StepsAsLibTorchsAdamWOverManySteps) {
  AdamWRun fused = make_run(OptimizerKernel::kFused);
  AdamWRun reference = make_run(OptimizerKernel::kPerTensor);
  const torch::Tensor start = fused.decayed[0].detach().clone();
  run_steps(fused, 0, 40);
  run_steps(reference, 0, 40);
  expect_same_parameters(fused, reference, 1e-13);
  EXPECT_GT(testing::relative_difference(fused.decayed[0], start), 1e-3);  // they moved
  // The parameter left without a gradient every third step took 26 steps, the others 40.
  const auto* skipped = compat::optimizer_state_of(*fused.optimizer, fused.decayed[1]);
  const auto* every = compat::optimizer_state_of(*fused.optimizer, fused.plain[0]);
  ASSERT_NE(skipped, nullptr);
  ASSERT_NE(every, nullptr);
  EXPECT_EQ(static_cast<const torch::optim::AdamWParamState*>(skipped)->step(), 26);
  EXPECT_EQ(static_cast<const torch::optim::AdamWParamState*>(every)->step(), 40);
}

TEST_F(FusedAdamWTest, AParameterWithoutGradientIsLeftAlone) {
  AdamWRun fused = make_run(OptimizerKernel::kFused);
  const torch::Tensor before = fused.decayed[1].detach().clone();
  run_steps(fused, 0, 1);  // step 0: no gradient for decayed[1]
  EXPECT_TRUE(torch::equal(fused.decayed[1], before));
  EXPECT_EQ(compat::optimizer_state_of(*fused.optimizer, fused.decayed[1]), nullptr);
}

TEST_F(FusedAdamWTest, StateSavedByEitherContinuesInTheOther) {
  for (const bool fused_first : {true, false}) {
    AdamWRun first = make_run(fused_first ? OptimizerKernel::kFused : OptimizerKernel::kPerTensor);
    run_steps(first, 0, 10);
    std::stringstream saved;
    {
      torch::serialize::OutputArchive archive;
      first.optimizer->save(archive);
      archive.save_to(saved);
    }
    // The other kind over parameters equal to the first's, given the saved state.
    AdamWRun second = make_run(fused_first ? OptimizerKernel::kPerTensor : OptimizerKernel::kFused);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < first.decayed.size(); ++i)
        second.decayed[i].copy_(first.decayed[i]);
      second.plain[0].copy_(first.plain[0]);
      torch::serialize::InputArchive archive;
      archive.load_from(saved);
      second.optimizer->load(archive);
    }
    run_steps(first, 10, 20);
    run_steps(second, 10, 20);
    expect_same_parameters(first, second, 1e-13);
  }
}

TEST_F(FusedAdamWTest, ChannelsLastParametersWithContiguousGradientsStepAsLibTorchs) {
  // A convolution's weight in channels-last layout whose gradient arrives contiguous: walked as
  // flat arrays without conversion, the two would be paired element by wrong element.
  torch::manual_seed(8);
  const torch::Tensor start =
      torch::randn({4, 3, 3, 3}, torch::kFloat64).contiguous(torch::MemoryFormat::ChannelsLast);
  std::vector<torch::Tensor> weights;
  std::vector<std::unique_ptr<torch::optim::AdamW>> optimizers;
  for (const OptimizerKernel kernel : {OptimizerKernel::kFused, OptimizerKernel::kPerTensor}) {
    weights.push_back(start.clone(torch::MemoryFormat::Preserve).requires_grad_());
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{weights.back()});
    const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
    if (kernel == OptimizerKernel::kFused)
      optimizers.push_back(std::make_unique<FusedAdamW>(std::move(groups), options));
    else
      optimizers.push_back(std::make_unique<torch::optim::AdamW>(std::move(groups), options));
  }
  ASSERT_FALSE(weights[0].is_contiguous());
  for (int step = 0; step < 5; ++step) {
    const torch::Tensor grad = torch::randn({4, 3, 3, 3}, torch::kFloat64);  // contiguous
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i].mutable_grad() = grad.clone();
      optimizers[i]->step();
    }
  }
  EXPECT_LE(testing::relative_difference(weights[0], weights[1]), 1e-13);
  EXPECT_GT(testing::relative_difference(weights[0], start), 1e-3);
}

TEST(OptimizerKernel, ParsesResolvesAndRefuses) {
  for (const OptimizerKernel k :
       {OptimizerKernel::kAuto, OptimizerKernel::kFused, OptimizerKernel::kPerTensor})
    EXPECT_EQ(parse_optimizer_kernel(to_string(k), "optim.kernel"), k);
  EXPECT_EQ(testing::input_error_of([] { parse_optimizer_kernel("foreach", "optim.kernel"); }),
            "optim.kernel must be \"auto\", \"fused\" or \"per_tensor\", got \"foreach\"");
  EXPECT_EQ(resolve_optimizer_kernel(OptimizerKernel::kAuto),
            compat::kHasFusedAdamW ? OptimizerKernel::kFused : OptimizerKernel::kPerTensor);
  EXPECT_EQ(resolve_optimizer_kernel(OptimizerKernel::kPerTensor), OptimizerKernel::kPerTensor);
  torch::nn::Linear layer(3, 2);
  const auto made = [&](OptimizerKernel kernel) {
    return make_optimizer(*layer, OptimizerOptions().kernel(kernel));
  };
  EXPECT_EQ(dynamic_cast<FusedAdamW*>(made(OptimizerKernel::kPerTensor).get()), nullptr);
  if (compat::kHasFusedAdamW) {
    EXPECT_NE(dynamic_cast<FusedAdamW*>(made(OptimizerKernel::kAuto).get()), nullptr);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(layer->parameters());
    EXPECT_NE(testing::input_error_of([&] {
                FusedAdamW(std::move(groups), torch::optim::AdamWOptions(1e-3).amsgrad(true));
              }).find("no AMSGrad"),
              std::string::npos);
  } else {
    EXPECT_NE(testing::input_error_of([&] {
                made(OptimizerKernel::kFused);
              }).find("OptimizerOptions.kernel = fused needs LibTorch 2.4"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace bigbatch::engine
