// The loss scaler alone: its state machine over many windows, its checks and its misuse errors.
#include "bigbatch/engine/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace bigbatch {
namespace {

using engine::LossScaler;
using engine::LossScalerOptions;

/// One window of the scaler's protocol with no gradients: unscale, then update.
void window(LossScaler& scaler, bool overflow) {
  EXPECT_FALSE(scaler.unscale_and_check({}));
  scaler.update(overflow);
}

TEST(LossScaler, ScaledGradientsUnscaleToTheUnscaledOnesExactly) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({5, 4}, torch::kFloat64).requires_grad_();
  const torch::Tensor x = torch::randn({7, 4}, torch::kFloat64);
  torch::matmul(x, w.t()).tanh().sum().backward();
  const torch::Tensor reference = w.grad().clone();
  w.mutable_grad().reset();

  LossScaler scaler(LossScalerOptions().init_scale(1024));
  const torch::Tensor scaled = scaler.scale_loss(torch::matmul(x, w.t()).tanh().sum());
  scaled.backward();
  EXPECT_TRUE(torch::equal(w.grad(), reference * 1024));
  EXPECT_FALSE(scaler.unscale_and_check({w}));
  EXPECT_TRUE(torch::equal(w.grad(), reference));  // a power of two: bit-exact
}

TEST(LossScaler, ScalesAHalfLossInFloat32) {
  LossScaler scaler;  // 65536: 5 x 65536 is beyond half's largest value, 65504
  const torch::Tensor scaled = scaler.scale_loss(torch::full({}, 5.0, torch::kHalf));
  EXPECT_EQ(scaled.scalar_type(), torch::kFloat32);
  EXPECT_EQ(scaled.item<float>(), 327680.0f);
  EXPECT_EQ(scaler.scale_loss(torch::full({}, 5.0, torch::kFloat64)).scalar_type(),
            torch::kFloat64);
}

TEST(LossScaler, GrowsExactlyAfterGrowthIntervalCleanWindows) {
  LossScaler scaler(LossScalerOptions().init_scale(8).growth_factor(2).growth_interval(3));
  for (int round = 1; round <= 3; ++round) {
    const double before = scaler.scale();
    window(scaler, false);
    window(scaler, false);
    EXPECT_EQ(scaler.scale(), before) << "round " << round;
    EXPECT_EQ(scaler.state().clean_windows, 2);
    window(scaler, false);
    EXPECT_EQ(scaler.scale(), before * 2) << "round " << round;
    EXPECT_EQ(scaler.state().clean_windows, 0);
  }
  EXPECT_EQ(scaler.scale(), 64);
  EXPECT_EQ(scaler.state().skipped_windows, 0);
}

TEST(LossScaler, OverflowBacksOffAndRestartsTheGrowthCount) {
  LossScaler scaler(LossScalerOptions().init_scale(1024).backoff_factor(0.25).growth_interval(3));
  window(scaler, false);
  window(scaler, false);
  window(scaler, true);
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.state().clean_windows, 0);
  EXPECT_EQ(scaler.state().skipped_windows, 1);
  window(scaler, false);
  window(scaler, false);
  EXPECT_EQ(scaler.scale(), 256);  // two clean windows since the overflow are not three
  window(scaler, false);
  EXPECT_EQ(scaler.scale(), 512);
}

TEST(LossScaler, BacksOffToMinScaleAndAnOverflowThereIsAnError) {
  LossScaler scaler(LossScalerOptions().init_scale(6).min_scale(2));
  window(scaler, true);
  EXPECT_EQ(scaler.scale(), 3);
  window(scaler, true);
  EXPECT_EQ(scaler.scale(), 2);  // 1.5 clamped to the minimum
  EXPECT_FALSE(scaler.unscale_and_check({}));
  try {
    scaler.update(true);
    FAIL() << "expected a runtime_error";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("loss scale reached its minimum (2 = LossScalerOptions.min_scale)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("3 windows skipped"), std::string::npos) << message;
    EXPECT_NE(message.find("learning rate"), std::string::npos) << message;
  }
}

TEST(LossScaler, RefusesMoreThanOneUnscaleOrUpdatePerWindow) {
  LossScaler scaler;
  try {
    scaler.update(false);
    FAIL() << "expected a logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("unscale_and_check() once and update() once"),
              std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(scaler.unscale_and_check({}));
  try {
    scaler.unscale_and_check({});
    FAIL() << "expected a logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("unscale once per window"), std::string::npos)
        << error.what();
  }
  scaler.update(false);
  EXPECT_THROW(scaler.update(false), std::logic_error);
  EXPECT_EQ(scaler.state().clean_windows, 1);  // the refused calls changed nothing
}

TEST(LossScaler, FindsOneInfOrNanAmongManyAndIgnoresHugeFiniteGradients) {
  const torch::Tensor a = torch::ones({1000}).requires_grad_();
  const torch::Tensor b = torch::ones({3, 3}).requires_grad_();
  const torch::Tensor no_grad = torch::ones({2}).requires_grad_();  // grad undefined: skipped
  const float max = std::numeric_limits<float>::max();
  for (const float bad : {std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::nanf("")}) {
    a.mutable_grad() = torch::full({1000}, max / 2);  // its norm overflows fp32; it is finite
    b.mutable_grad() = torch::ones({3, 3});
    LossScaler scaler(LossScalerOptions().init_scale(2));
    EXPECT_FALSE(scaler.unscale_and_check({a, b, no_grad}));
    scaler.update(false);
    EXPECT_TRUE(std::isinf(a.grad().norm().item<float>()));
    b.mutable_grad()[1][2] = bad;
    EXPECT_TRUE(scaler.unscale_and_check({a, b, no_grad})) << bad;
    scaler.update(true);
    EXPECT_FALSE(engine::gradients_finite({a, b}));
  }
  EXPECT_TRUE(engine::gradients_finite({no_grad}));
}

TEST(LossScaler, StateRoundTripContinuesIdentically) {
  const auto options = LossScalerOptions().init_scale(512).growth_interval(4);
  LossScaler first(options);
  for (const bool overflow : {false, false, false, false, false, true, false, false})
    window(first, overflow);
  const engine::LossScalerState saved = first.state();
  EXPECT_EQ(saved.scale, 512);
  EXPECT_EQ(saved.clean_windows, 2);
  EXPECT_EQ(saved.skipped_windows, 1);

  LossScaler second(options);
  second.load_state(saved);
  for (int i = 0; i < 2; ++i) {
    window(first, false);
    window(second, false);
  }
  EXPECT_EQ(first.scale(), 1024);
  EXPECT_EQ(second.scale(), first.scale());
  EXPECT_EQ(second.state().clean_windows, first.state().clean_windows);
  EXPECT_EQ(second.state().skipped_windows, 1);
  EXPECT_NE(testing::input_error_of([&] {
              second.load_state({0.5, 0, 0});
            }).find("scale = 0.5 must be finite and >= LossScalerOptions.min_scale = 1"),
            std::string::npos);
}

TEST(LossScaler, OptionsOutOfRangeAreInputErrorsNamingTheKey) {
  const auto error_of = [](const LossScalerOptions& options) {
    return testing::input_error_of([&] { LossScaler scaler(options); });
  };
  EXPECT_NE(
      error_of(LossScalerOptions().growth_factor(1)).find("LossScalerOptions.growth_factor = 1"),
      std::string::npos);
  EXPECT_NE(
      error_of(LossScalerOptions().backoff_factor(1)).find("LossScalerOptions.backoff_factor = 1"),
      std::string::npos);
  EXPECT_NE(
      error_of(LossScalerOptions().backoff_factor(0)).find("LossScalerOptions.backoff_factor = 0"),
      std::string::npos);
  EXPECT_NE(error_of(LossScalerOptions().min_scale(0)).find("LossScalerOptions.min_scale = 0"),
            std::string::npos);
  EXPECT_NE(
      error_of(LossScalerOptions().init_scale(0.5)).find("LossScalerOptions.init_scale = 0.5"),
      std::string::npos);
  EXPECT_NE(error_of(LossScalerOptions().growth_interval(0))
                .find("LossScalerOptions.growth_interval = 0"),
            std::string::npos);
}

}  // namespace
}  // namespace bigbatch
