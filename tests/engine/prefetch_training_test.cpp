// Whole training runs with micro-batches gathered ahead on a background thread: bitwise the
// same data order, losses and weights as gathering them synchronously, out-of-memory restarts
// and skipped windows included.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <thread>

#include "engine/mlp_training_run.h"

namespace bigbatch {
namespace {

using testing::expect_identical;
using testing::RunOptions;
using testing::RunResult;
using testing::train;

/// Runs `run` synchronously and at several depths (less than a window, one window, three).
void expect_same_at_every_depth(RunOptions run, const RunResult& synchronous) {
  for (const int64_t depth : {1, 3, 8, 24}) {
    run.prefetch_depth = depth;
    expect_identical(train(run), synchronous, "prefetch_depth " + std::to_string(depth));
  }
}

TEST(PrefetchTraining, SameDataOrderLossesAndWeightsAsSynchronousGathering) {
  const RunResult synchronous = train(RunOptions{});
  ASSERT_EQ(synchronous.sink.windows.size(), 20u);
  EXPECT_EQ(synchronous.summary.epochs_started, 2);
  expect_same_at_every_depth(RunOptions{}, synchronous);
}

TEST(PrefetchTraining, SameAcrossAnOutOfMemoryRestartAndASkippedWindow) {
  RunOptions run;
  run.oom_forward_at = 19;    // micro-batch 3 of 8 in step 3: then 16 x 4 per window
  run.inf_forward_at = {70};  // 16 + 3 + 16 * 3 = 67 calls before step 6: its micro-batch 3
  const RunResult synchronous = train(run);
  ASSERT_EQ(synchronous.sink.notices.size(), 2u);
  EXPECT_NE(synchronous.sink.notices[0].find("micro-batch 8 in step 3"), std::string::npos)
      << synchronous.sink.notices[0];
  EXPECT_NE(synchronous.sink.notices[1].find("step 6 skipped"), std::string::npos)
      << synchronous.sink.notices[1];
  EXPECT_EQ(synchronous.sink.windows[2].micro_batches, 16);
  EXPECT_TRUE(synchronous.sink.windows[5].skipped);
  EXPECT_EQ(synchronous.summary.skipped_steps, 1);
  expect_same_at_every_depth(run, synchronous);
}

TEST(PrefetchTraining, OutOfMemoryWhileGatheringRestartsTheWindow) {
  // get() call 3 is micro-batch 3 of step 1; call 11 is micro-batch 3 of step 2, which a
  // prefetcher gathers on its worker while step 1 computes. Either restarts its window at
  // micro-batch 4, as out of memory in forward does, whether the worker gathered it or not.
  for (const int64_t fail_at : {3, 11}) {
    RunOptions run;
    run.oom_gather_at = fail_at;
    const RunResult synchronous = train(run);
    const std::string step = fail_at == 3 ? "1" : "2";
    ASSERT_EQ(synchronous.sink.notices.size(), 1u);
    EXPECT_NE(synchronous.sink.notices[0].find("micro-batch 8 in step " + step), std::string::npos)
        << synchronous.sink.notices[0];
    EXPECT_EQ(synchronous.summary.final_micro_batch, 4);
    expect_same_at_every_depth(run, synchronous);
  }
}

TEST(PrefetchTraining, GathersOnAWorkerThreadOnlyWhenTheDepthIsPositive) {
  RunOptions run;
  const RunResult synchronous = train(run);
  EXPECT_EQ(synchronous.gather_threads, std::set<std::thread::id>{std::this_thread::get_id()});
  run.prefetch_depth = 8;
  const RunResult prefetched = train(run);
  ASSERT_EQ(prefetched.gather_threads.size(), 1u);
  EXPECT_NE(*prefetched.gather_threads.begin(), std::this_thread::get_id());
}

TEST(PrefetchTraining, GathersNoWindowBeyondTheLastStep) {
  // 20 windows: 2 epochs of 9 x 8 micro-batches of 8 and a last window of 20 as 8 + 8 + 4.
  const int64_t needed = 2 * (9 * 8 + 3);
  for (const int64_t depth : {0, 8, 24}) {
    RunOptions run;
    run.prefetch_depth = depth;
    EXPECT_EQ(train(run).gathers, needed) << "prefetch_depth " << depth;
  }
}

TEST(PrefetchTraining, NegativeDepthIsAnInputError) {
  const data::ContextDataset dataset(testing::random_bytes(100, 3),
                                     data::ContextDatasetOptions(4).name("train"));
  models::Mlp model(models::MlpOptions().context(4).embed(8).hidden(32));
  engine::CrossEntropyObjective objective(engine::forward_of(model), engine::LossUnit::kSample);
  const engine::Plan plan =
      engine::resolve_plan(engine::BatchOptions().global_batch(16).micro_batch(8));
  auto optimizer = engine::make_optimizer(*model, engine::OptimizerOptions().lr(plan.lr));
  const engine::LrSchedule schedule(engine::LrScheduleOptions().peak_lr(plan.lr).total_steps(1));
  const engine::TrainingSetup setup =
      testing::setup_of(*model, objective, *optimizer, schedule, plan, dataset);
  const std::string message = testing::input_error_of(
      [&] { engine::Trainer(setup, engine::TrainerOptions().total_steps(1).prefetch_depth(-1)); });
  EXPECT_NE(message.find("TrainerOptions.prefetch_depth = -1 must be >= 0"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace bigbatch
