#include "bigbatch/engine/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/core/check.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using engine::LrSchedule;
using engine::LrScheduleOptions;
using engine::ScheduleKind;

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  const LrSchedule s(
      LrScheduleOptions().peak_lr(1.0).warmup_steps(4).total_steps(14).min_lr_ratio(0.1));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 1.0);                // cosine starts at the peak
  EXPECT_NEAR(s.lr_at(9), 0.1 + 0.9 * 0.5, 1e-15);  // half way
  EXPECT_NEAR(s.lr_at(14), 0.1, 1e-15);             // the floor
  EXPECT_NEAR(s.lr_at(100), 0.1, 1e-15);            // and stays there
  for (int64_t step = 4; step < 14; ++step)
    EXPECT_GT(s.lr_at(step), s.lr_at(step + 1));
}

TEST(LrSchedule, ConstantAndNoWarmup) {
  const LrSchedule constant(LrScheduleOptions().kind(ScheduleKind::kConstant).peak_lr(0.3));
  EXPECT_DOUBLE_EQ(constant.lr_at(0), 0.3);
  EXPECT_DOUBLE_EQ(constant.lr_at(1000), 0.3);
  const LrSchedule cosine(
      LrScheduleOptions().peak_lr(2.0).warmup_steps(0).total_steps(2).min_lr_ratio(0));
  EXPECT_DOUBLE_EQ(cosine.lr_at(0), 2.0);
  EXPECT_NEAR(cosine.lr_at(1), 1.0, 1e-15);
  EXPECT_NEAR(cosine.lr_at(2), 0.0, 1e-15);
}

TEST(LrSchedule, WarmupThenAStraightLineOrThePeak) {
  const LrSchedule linear(LrScheduleOptions()
                              .kind(ScheduleKind::kWarmupLinear)
                              .peak_lr(1.0)
                              .warmup_steps(2)
                              .total_steps(12)
                              .min_lr_ratio(0.2));
  EXPECT_DOUBLE_EQ(linear.lr_at(0), 0.5);
  EXPECT_DOUBLE_EQ(linear.lr_at(2), 1.0);
  EXPECT_NEAR(linear.lr_at(7), 0.2 + 0.8 * 0.5, 1e-15);  // half way down
  EXPECT_NEAR(linear.lr_at(12), 0.2, 1e-15);
  EXPECT_NEAR(linear.lr_at(50), 0.2, 1e-15);
  for (int64_t step = 3; step < 12; ++step)  // equal steps down
    EXPECT_NEAR(linear.lr_at(step - 1) - linear.lr_at(step), 0.08, 1e-15) << step;
  const LrSchedule flat(LrScheduleOptions()
                            .kind(ScheduleKind::kWarmupConstant)
                            .peak_lr(0.5)
                            .warmup_steps(4)
                            .total_steps(10));
  EXPECT_DOUBLE_EQ(flat.lr_at(0), 0.125);
  EXPECT_DOUBLE_EQ(flat.lr_at(3), 0.5);
  EXPECT_DOUBLE_EQ(flat.lr_at(9), 0.5);
  EXPECT_DOUBLE_EQ(flat.lr_at(100), 0.5);
  for (const ScheduleKind kind : {ScheduleKind::kConstant, ScheduleKind::kWarmupCosine,
                                  ScheduleKind::kWarmupLinear, ScheduleKind::kWarmupConstant})
    EXPECT_EQ(engine::parse_schedule_kind(engine::to_string(kind)), kind);
}

TEST(LrSchedule, DescribesItsShape) {
  const auto options = LrScheduleOptions().warmup_steps(5).min_lr_ratio(0.25);
  EXPECT_EQ(engine::describe(options), "5 warmup steps, then a half cosine to lr x 0.25");
  EXPECT_EQ(engine::describe(LrScheduleOptions(options).kind(ScheduleKind::kWarmupLinear)),
            "5 warmup steps, then a straight line to lr x 0.25");
  EXPECT_EQ(engine::describe(LrScheduleOptions(options).kind(ScheduleKind::kWarmupConstant)),
            "5 warmup steps, then the peak lr");
  EXPECT_EQ(engine::describe(LrScheduleOptions(options).kind(ScheduleKind::kConstant)),
            "the peak lr from the first step (no warmup)");
}

TEST(LrSchedule, RejectsBadOptions) {
  EXPECT_THROW(LrSchedule(LrScheduleOptions().peak_lr(0)), InputError);
  EXPECT_THROW(LrSchedule(LrScheduleOptions().warmup_steps(-1)), InputError);
  EXPECT_THROW(LrSchedule(LrScheduleOptions().min_lr_ratio(1.5)), InputError);
  EXPECT_EQ(testing::input_error_of([] { engine::parse_schedule_kind("linear", "schedule.kind"); }),
            "schedule.kind = \"linear\" is not a schedule; expected one of \"constant\", "
            "\"warmup_cosine\", \"warmup_linear\", \"warmup_constant\"");
}

}  // namespace
}  // namespace bigbatch
