#include "bigbatch/engine/micro_batch_search.h"

#include <gtest/gtest.h>

#include "bigbatch/engine/objective.h"
#include "bigbatch/memory/tracker.h"
#include "bigbatch/models/gpt.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

class MicroBatchSearch : public ::testing::Test {
 protected:
  void SetUp() override {
    memory::MemoryTracker::instance().install();
    torch::manual_seed(3);
    model_ = models::Gpt(models::GptOptions().context(32).layers(2).heads(2).embed(32));
    inputs_ = torch::randint(0, 256, {64, 32}, torch::kLong);
  }
  void TearDown() override { memory::MemoryTracker::instance().set_budget(0); }

  /// Forward + backward of the first b samples, gradients freed.
  void trial(int64_t b) {
    const torch::Tensor x = inputs_.slice(0, 0, b);
    torch::nn::functional::cross_entropy(model_->forward(x).reshape({-1, 256}), x.reshape({-1}))
        .backward();
    for (auto& p : model_->parameters())
      p.mutable_grad().reset();
  }
  /// Whether a trial at b fits under `budget`.
  bool fits(int64_t b, int64_t budget) {
    memory::MemoryTracker::instance().set_budget(budget);
    bool ok = true;
    try {
      trial(b);
    } catch (const c10::OutOfMemoryError&) {
      ok = false;
    }
    memory::MemoryTracker::instance().set_budget(0);
    return ok;
  }

  models::Gpt model_{nullptr};
  torch::Tensor inputs_;
};

TEST_F(MicroBatchSearch, PicksASizeThatFitsNearTheLargestInFewTrials) {
  const int64_t budget = memory::MemoryTracker::instance().current_bytes() + (4 << 20);
  const auto found = engine::find_micro_batch(
      [&](int64_t b) { trial(b); },
      engine::MicroBatchSearchOptions().global_batch(64).budget_bytes(budget));
  EXPECT_LE(found.out_of_memory_trials, 3);
  EXPECT_GE(found.micro_batch, 1);
  EXPECT_LT(found.micro_batch, 64) << "the budget should bind for this test to mean anything";
  EXPECT_TRUE(fits(found.micro_batch, budget));
  int64_t largest = 1;  // exhaustive
  while (largest < 64 && fits(largest + 1, budget))
    ++largest;
  EXPECT_GE(static_cast<double>(found.micro_batch), 0.9 * static_cast<double>(largest))
      << "largest that fits: " << largest << "; " << found.describe();
  EXPECT_EQ(memory::MemoryTracker::instance().budget(), 0);  // restored
}

TEST_F(MicroBatchSearch, ANonLinearNeedRunsOutButStillEndsOnAFittingSizeWithinThreeTrials) {
  // Memory that grows with the square of the micro-batch: the line through the probes at 1 and 4
  // predicts far too large a size, so the confirming trials run out and must step down.
  memory::MemoryTracker& tracker = memory::MemoryTracker::instance();
  const int64_t room = 1024 * 1024;
  const int64_t budget = tracker.current_bytes() + room;
  auto need = [](int64_t b) { return b * b * 1024; };  // bytes
  auto square_trial = [&](int64_t b) {
    torch::Tensor held = torch::empty({need(b)}, torch::kUInt8);
  };
  const auto found = engine::find_micro_batch(
      square_trial, engine::MicroBatchSearchOptions().global_batch(64).budget_bytes(budget));
  EXPECT_GE(found.out_of_memory_trials, 1) << found.describe();
  EXPECT_LE(found.out_of_memory_trials, 3) << found.describe();
  EXPECT_LE(need(found.micro_batch), room) << found.describe();  // it fits
  EXPECT_GT(found.micro_batch, 4) << "no better than the probes: " << found.describe();
  EXPECT_EQ(tracker.budget(), 0);
}

TEST_F(MicroBatchSearch, MicroBatchOfOneOverBudgetNamesTheNeedAndTheBudget) {
  const int64_t budget = memory::MemoryTracker::instance().current_bytes() + (64 << 10);
  const std::string message = testing::input_error_of([&] {
    engine::find_micro_batch(
        [&](int64_t b) { trial(b); },
        engine::MicroBatchSearchOptions().global_batch(64).budget_bytes(budget));
  });
  EXPECT_NE(message.find("a micro-batch of 1 needs"), std::string::npos) << message;
  EXPECT_NE(message.find("memory budget of"), std::string::npos) << message;
}

}  // namespace
}  // namespace bigbatch
