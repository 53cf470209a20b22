#include "bigbatch/engine/plan.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/core/check.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using engine::BatchOptions;
using engine::LrScaling;
using engine::Plan;
using engine::resolve_plan;

std::string error_of(const BatchOptions& options) {
  return testing::input_error_of([&] { resolve_plan(options); });
}

TEST(Plan, MicroBatchGivesAccumStepsAndRemainder) {
  const engine::Plan plan = resolve_plan(BatchOptions().global_batch(64).micro_batch(12));
  EXPECT_EQ(plan.micro_batch, 12);
  EXPECT_EQ(plan.accum_steps, 6);
  EXPECT_EQ(plan.split_window(64), (std::vector<int64_t>{12, 12, 12, 12, 12, 4}));
  EXPECT_EQ(plan.split_window(30), (std::vector<int64_t>{12, 12, 6}));
  EXPECT_EQ(resolve_plan(BatchOptions().global_batch(100).micro_batch(32)).split_window(100),
            (std::vector<int64_t>{32, 32, 32, 4}));
}

TEST(Plan, AccumStepsGivesMicroBatch) {
  const engine::Plan plan = resolve_plan(BatchOptions().global_batch(64).accum_steps(8));
  EXPECT_EQ(plan.micro_batch, 8);
  EXPECT_EQ(plan.accum_steps, 8);
  EXPECT_EQ(resolve_plan(BatchOptions().global_batch(64).accum_steps(5)).split_window(64),
            (std::vector<int64_t>{13, 13, 13, 13, 12}));
  EXPECT_EQ(resolve_plan(BatchOptions().global_batch(64)).accum_steps, 1);
  EXPECT_EQ(resolve_plan(BatchOptions().global_batch(64).micro_batch(8).accum_steps(8)).micro_batch,
            8);
}

TEST(Plan, LearningRateScalingRules) {
  const auto base = BatchOptions().global_batch(256).micro_batch(32).base_lr(0.1).base_batch(64);
  EXPECT_DOUBLE_EQ(resolve_plan(BatchOptions(base).lr_scaling(LrScaling::kNone)).lr, 0.1);
  EXPECT_DOUBLE_EQ(resolve_plan(BatchOptions(base).lr_scaling(LrScaling::kLinear)).lr, 0.4);
  EXPECT_DOUBLE_EQ(resolve_plan(BatchOptions(base).lr_scaling(LrScaling::kSqrt)).lr, 0.2);
  EXPECT_EQ(engine::parse_lr_scaling("sqrt"), LrScaling::kSqrt);
  EXPECT_THROW(engine::parse_lr_scaling("cubic"), InputError);
}

TEST(Plan, ImpossibleSettingsNameTheFieldAndValue) {
  EXPECT_NE(error_of(BatchOptions().global_batch(0)).find("BatchOptions.global_batch = 0"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(-4)).find("BatchOptions.global_batch = -4"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(64).micro_batch(-1)).find("micro_batch = -1"),
            std::string::npos);
  EXPECT_NE(
      error_of(BatchOptions().global_batch(64).micro_batch(128))
          .find("BatchOptions.micro_batch = 128 is larger than BatchOptions.global_batch = 64"),
      std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(64).micro_batch(8).accum_steps(4))
                .find("is 32, not BatchOptions.global_batch = 64"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(64).accum_steps(100)).find("accum_steps = 100"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(9).accum_steps(4)).find("accum_steps = 4"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(64).world_size(3))
                .find("BatchOptions.global_batch = 64 does not split evenly over 3 processes"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().world_size(0)).find("world size"), std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(64).world_size(2).micro_batch(40))
                .find("BatchOptions.micro_batch = 40 is larger than the per-process batch "
                      "(BatchOptions.global_batch = 64 / 2 processes = 32)"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().global_batch(64).world_size(2).micro_batch(8).accum_steps(8))
                .find("is 64, not the per-process batch"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().base_lr(-1)).find("BatchOptions.base_lr = -1"),
            std::string::npos);
  EXPECT_NE(error_of(BatchOptions().base_lr(NAN)).find("BatchOptions.base_lr = nan"),
            std::string::npos);
}

TEST(Plan, WorldSizeSplitsTheGlobalBatchOverTheRanks) {
  const Plan by_micro = resolve_plan(BatchOptions().global_batch(64).world_size(2).micro_batch(8));
  EXPECT_EQ(by_micro.rank_batch(), 32);
  EXPECT_EQ(by_micro.accum_steps, 4);
  const Plan by_accum = resolve_plan(BatchOptions().global_batch(64).world_size(4).accum_steps(2));
  EXPECT_EQ(by_accum.micro_batch, 8);
  EXPECT_EQ(by_accum.split_window(16), (std::vector<int64_t>{8, 8}));  // a rank's shard
  EXPECT_TRUE(by_accum.split_window(0).empty());                       // an empty shard
  Plan smaller = by_micro;
  smaller.set_micro_batch(3);
  EXPECT_EQ(smaller.accum_steps, 11);  // 32 as 10 x 3 + 2
  Table table("plan");
  by_micro.describe(table);
  const std::string text = table.render();
  EXPECT_NE(text.find("processes (data parallel): 64 = 8 x 4 x 2"), std::string::npos) << text;
}

TEST(Plan, DescribeListsTheSplit) {
  Table table("plan");
  resolve_plan(BatchOptions().global_batch(64).micro_batch(12)).describe(table);
  const std::string text = table.render();
  EXPECT_NE(text.find("5 x 12 + 4"), std::string::npos) << text;
  EXPECT_NE(text.find("global_batch"), std::string::npos);
}

}  // namespace
}  // namespace bigbatch
