// read_train_config's precision keys and the one place that decides loss scaling.
#include "bigbatch/cli/train_config.h"

#include <gtest/gtest.h>

namespace bigbatch::cli {
namespace {

TrainConfig read(const std::vector<std::string>& overrides) {
  ConfigReader reader;
  for (const std::string& assignment : overrides)
    reader.set_override(assignment);
  return read_train_config(reader);
}

TEST(TrainConfig, PrecisionDefaultsToFp32AndReadsBf16) {
  EXPECT_EQ(read({}).precision, nn::Precision::kFp32);
  EXPECT_EQ(read({"model.precision=bf16"}).precision, nn::Precision::kBf16);
  EXPECT_EQ(read({"train.blas_threads=3"}).blas_threads, 3);
}

TEST(TrainConfig, AutoLossScalingFollowsFp16Only) {
  TrainConfig config = read({});
  EXPECT_FALSE(loss_scaling_enabled(config));
  config.precision = nn::Precision::kBf16;
  EXPECT_FALSE(loss_scaling_enabled(config));
  config.precision = nn::Precision::kFp16;  // only reachable in a CUDA build's config
  EXPECT_TRUE(loss_scaling_enabled(config));
  config.loss_scale = LossScaleMode::kOff;
  EXPECT_FALSE(loss_scaling_enabled(config));
  config.precision = nn::Precision::kFp32;
  config.loss_scale = LossScaleMode::kDynamic;
  EXPECT_TRUE(loss_scaling_enabled(config));
}

}  // namespace
}  // namespace bigbatch::cli
