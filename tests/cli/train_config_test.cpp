// read_train_config: the precision keys, concurrency, and the one place that decides loss scaling.
#include "bigbatch/cli/train_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/test_support.h"

namespace bigbatch::cli {
namespace {

TrainConfig read(const std::vector<std::string>& overrides) {
  ConfigReader reader;
  for (const std::string& assignment : overrides)
    reader.set_override(assignment);
  return read_train_config(reader);
}

TEST(TrainConfig, PrecisionDefaultsToFp32AndReadsBf16) {
  EXPECT_EQ(read({}).job.precision, nn::Precision::kFp32);
  EXPECT_EQ(read({"model.precision=bf16"}).job.precision, nn::Precision::kBf16);
  EXPECT_EQ(read({"train.blas_threads=3"}).job.threads.blas(), 3);
}

TEST(TrainConfig, AutoLossScalingFollowsFp16Only) {
  TrainConfig config = read({});
  EXPECT_FALSE(job::loss_scaling_enabled(config.job));
  config.job.precision = nn::Precision::kBf16;
  EXPECT_FALSE(job::loss_scaling_enabled(config.job));
  config.job.precision = nn::Precision::kFp16;  // only reachable in a CUDA build's config
  EXPECT_TRUE(job::loss_scaling_enabled(config.job));
  config.job.loss_scale = job::LossScaleMode::kOff;
  EXPECT_FALSE(job::loss_scaling_enabled(config.job));
  config.job.precision = nn::Precision::kFp32;
  config.job.loss_scale = job::LossScaleMode::kDynamic;
  EXPECT_TRUE(job::loss_scaling_enabled(config.job));
}

TEST(TrainConfig, ConcurrentMicroBatchesNeedAModelWithoutBatchNormOrDropout) {
  // "auto" by default: the job chooses (job::choose_concurrent_micro_batches).
  EXPECT_TRUE(read({}).job.auto_concurrent_micro_batches);
  EXPECT_EQ(read({}).job.trainer.concurrent_micro_batches(), 1);
  EXPECT_TRUE(read({"train.concurrent_micro_batches=auto"}).job.auto_concurrent_micro_batches);
  EXPECT_FALSE(read({"train.concurrent_micro_batches=1"}).job.auto_concurrent_micro_batches);
  EXPECT_EQ(read({"train.concurrent_micro_batches=2"}).job.trainer.concurrent_micro_batches(), 2);
  // auto is allowed with every model: it takes one pass at a time where the model needs it.
  EXPECT_TRUE(read({"model.kind=resnet"}).job.auto_concurrent_micro_batches);
  // The ResNet with GroupNorm in place of BatchNorm, the BERT without dropout.
  EXPECT_EQ(
      read({"train.concurrent_micro_batches=2", "model.kind=resnet", "model.norm_policy=group"})
          .job.trainer.concurrent_micro_batches(),
      2);
  EXPECT_EQ(read({"train.concurrent_micro_batches=2", "model.kind=bert", "bert.dropout=0"})
                .job.trainer.concurrent_micro_batches(),
            2);
  const auto error_of = [](const std::vector<std::string>& overrides) {
    return testing::input_error_of([&] { read(overrides); });
  };
  const std::string zero = error_of({"train.concurrent_micro_batches=0"});
  EXPECT_NE(zero.find("train.concurrent_micro_batches = 0 must be >= 1"), std::string::npos)
      << zero;
  EXPECT_EQ(read({"train.concurrent_micro_batches=2", "model.kind=resnet"})
                .job.trainer.concurrent_micro_batches(),
            2);  // its BatchNorms' fused kernel defers their writes, in fp32 and bf16
  EXPECT_EQ(read({"train.concurrent_micro_batches=2", "model.kind=resnet", "model.precision=bf16"})
                .job.trainer.concurrent_micro_batches(),
            2);
  const std::string batch_norm =
      error_of({"train.concurrent_micro_batches=2", "model.kind=resnet", "model.dtype=float64"});
  EXPECT_NE(batch_norm.find("needs BatchNorm on its fused kernel"), std::string::npos)
      << batch_norm;
  EXPECT_NE(batch_norm.find("model.norm_policy = \"ghost\""), std::string::npos) << batch_norm;
  const std::string bert = error_of({"train.concurrent_micro_batches=3", "model.kind=bert"});
  EXPECT_NE(bert.find("train.concurrent_micro_batches = 3 needs bert.dropout = 0, got 0.1"),
            std::string::npos)
      << bert;
  const std::string gpt = error_of({"train.concurrent_micro_batches=2", "gpt.dropout=0.2"});
  EXPECT_NE(gpt.find("needs gpt.dropout = 0, got 0.2"), std::string::npos) << gpt;
  const std::string word = error_of({"train.concurrent_micro_batches=many"});
  EXPECT_NE(word.find("an integer or \"auto\""), std::string::npos) << word;
}

}  // namespace
}  // namespace bigbatch::cli
