#include "bigbatch/job/micro_batch_trial.h"

#include <gtest/gtest.h>

namespace bigbatch::job {
namespace {

TEST(OptimizerStateBytes, OnlyTrainableParametersHaveState) {
  torch::nn::Linear layer(4, 3);  // weight 12 floats, bias 3
  const auto adamw = engine::OptimizerOptions().kind(engine::OptimizerKind::kAdamW);
  EXPECT_EQ(optimizer_state_bytes(adamw, *layer), 2 * 15 * 4);
  // A frozen weight (LoRA's base weights) gets no moments: only the bias's are reserved.
  layer->weight.requires_grad_(false);
  EXPECT_EQ(optimizer_state_bytes(adamw, *layer), 2 * 3 * 4);
  const auto sgd = engine::OptimizerOptions().kind(engine::OptimizerKind::kSgd);
  EXPECT_EQ(optimizer_state_bytes(engine::OptimizerOptions(sgd).momentum(0.9), *layer), 3 * 4);
  EXPECT_EQ(optimizer_state_bytes(engine::OptimizerOptions(sgd).momentum(0.0), *layer), 0);
}

}  // namespace
}  // namespace bigbatch::job
