// BatchNorm under accumulation: the policy names, the start notice, and ghost batch norm's
// running statistics kept per window by the trainer's window hooks.
#include <gtest/gtest.h>

#include "bigbatch/data/image_dataset.h"
#include "bigbatch/engine/norm_policy.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/models/resnet.h"
#include "bigbatch/nn/norm.h"
#include "engine/training_helpers.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

TEST(NormPolicy, ParsesAndPrintsEveryPolicy) {
  for (const char* name : {"keep", "group", "ghost"})
    EXPECT_EQ(engine::to_string(engine::parse_norm_policy(name, "model.norm_policy")), name);
  const std::string message =
      testing::input_error_of([] { engine::parse_norm_policy("sync", "model.norm_policy"); });
  EXPECT_NE(message.find("model.norm_policy = \"sync\""), std::string::npos) << message;
}

TEST(NormPolicy, NoticeSaysWhatBatchNormSees) {
  const engine::Plan split =
      engine::resolve_plan(engine::BatchOptions().global_batch(256).micro_batch(8));
  const engine::Plan whole =
      engine::resolve_plan(engine::BatchOptions().global_batch(256).micro_batch(256));
  EXPECT_EQ(engine::batch_norm_notice(0, split, engine::NormPolicy::kKeep), "");
  EXPECT_EQ(engine::batch_norm_notice(3, whole, engine::NormPolicy::kKeep), "");
  EXPECT_NE(engine::batch_norm_notice(3, split, engine::NormPolicy::kKeep)
                .find("3 BatchNorm layers see micro-batches of 8, not the window of 256"),
            std::string::npos);
  EXPECT_NE(engine::batch_norm_notice(1, split, engine::NormPolicy::kGhost)
                .find("1 BatchNorm layer: statistics over ghost batches of 8"),
            std::string::npos);
}

/// 96 random 8x8 images of 3 classes.
data::ImageDataset random_images() {
  torch::manual_seed(11);
  return data::ImageDataset(torch::randint(0, 256, {96, 1, 8, 8}, torch::kByte),
                            torch::randint(0, 3, {96}, torch::kLong),
                            data::ImageDatasetOptions().num_classes(3));
}

struct GhostRun {
  torch::Tensor running_mean;        ///< of the stem's BatchNorm after training
  std::vector<torch::Tensor> state;  ///< every parameter and buffer after training
  int64_t batches_tracked = 0;
  testing::RecordingHooks events;
};

/// Trains a tiny ResNet for `steps` steps of 32 as `micro_batch` passes, with ghost batch norm
/// (per-window running statistics committed by the hooks) or PyTorch's per-call updates,
/// `concurrent` micro-batches at once, its forward passes in `precision` (autocast).
GhostRun train(int64_t micro_batch, bool ghost, int64_t steps = 4, int64_t concurrent = 1,
               nn::Precision precision = nn::Precision::kFp32) {
  const data::ImageDataset images = random_images();
  torch::manual_seed(5);
  models::ResNet model(models::ResNetOptions().depth(8).width(4).classes(3));
  engine::BatchNormWindowHooks hooks(*model);
  if (ghost)
    nn::set_running_stats_mode(*model, nn::RunningStatsMode::kPerWindow);
  engine::AutocastObjective objective(std::make_unique<engine::CrossEntropyObjective>(
                                          engine::forward_of(model), engine::LossUnit::kSample),
                                      precision);
  const engine::Plan plan = engine::resolve_plan(
      engine::BatchOptions().global_batch(32).micro_batch(micro_batch).base_lr(1e-2));
  auto optimizer = engine::make_optimizer(*model, engine::OptimizerOptions().lr(plan.lr));
  const engine::LrSchedule schedule(
      engine::LrScheduleOptions().peak_lr(plan.lr).warmup_steps(0).total_steps(steps));
  GhostRun run;
  engine::TrainingSetup setup =
      testing::setup_of(*model, objective, *optimizer, schedule, plan, images);
  setup.window_hooks = {&run.events};
  if (ghost)
    setup.window_hooks.push_back(&hooks);
  engine::Trainer trainer(
      setup,
      engine::TrainerOptions().total_steps(steps).seed(3).concurrent_micro_batches(concurrent));
  trainer.fit();
  for (const auto& item : model->named_parameters())
    run.state.push_back(item.value().clone());
  for (const auto& item : model->named_buffers())
    run.state.push_back(item.value().clone());
  const nn::BatchNormImpl* stem = nn::batch_norms_of(*model).front();
  run.running_mean = stem->running_mean.clone();
  run.batches_tracked = stem->num_batches_tracked.item<int64_t>();
  return run;
}

TEST(GhostBatchNorm, RunningStatisticsMoveOncePerOptimizerStep) {
  const GhostRun per_call = train(8, false);
  const GhostRun ghost = train(8, true);
  EXPECT_EQ(per_call.batches_tracked, 16);  // 4 steps x 4 micro-batches
  EXPECT_EQ(ghost.batches_tracked, 4);      // 4 steps
  EXPECT_EQ(train(32, false).batches_tracked, 4);
  // In the first window the stem's BatchNorm sees the same 32 images whatever the split (its
  // convolution's weights have not moved yet): ghost statistics pooled over the window equal
  // those of one pass over all 32; per-call updates of four micro-batches do not.
  const GhostRun whole = train(32, false, 1);
  const GhostRun ghost_once = train(8, true, 1);
  const GhostRun per_call_once = train(8, false, 1);
  EXPECT_TRUE(torch::allclose(ghost_once.running_mean, whole.running_mean, 1e-5, 1e-6))
      << ghost_once.running_mean << whole.running_mean;
  EXPECT_FALSE(torch::allclose(per_call_once.running_mean, whole.running_mean, 1e-5, 1e-6));
  EXPECT_EQ(ghost.events.events.size(), 8u);  // begin, step per window
}

TEST(ConcurrentBatchNorm, TwoOrThreePassesAtOnceEndBitwiseAsOneAtATime) {
  // One OpenMP thread both ways, as each concurrent pass has, so every kernel computes the same
  // bits; the passes' running-statistics writes are made in micro-batch order after them. In
  // bf16 the BatchNorms run the fused kernel's bfloat16 path, which defers its writes too.
  struct OneThread {
    const int threads = torch::get_num_threads();
    OneThread() { torch::set_num_threads(1); }
    ~OneThread() { torch::set_num_threads(threads); }  // also after a failed ASSERT
  } one_thread;
  for (const nn::Precision precision : {nn::Precision::kFp32, nn::Precision::kBf16}) {
    for (const bool ghost : {false, true}) {
      const GhostRun one = train(8, ghost, 3, 1, precision);
      for (const int64_t concurrent : {2, 3}) {
        const GhostRun many = train(8, ghost, 3, concurrent, precision);
        EXPECT_EQ(many.batches_tracked, one.batches_tracked);
        ASSERT_EQ(many.state.size(), one.state.size());
        for (size_t i = 0; i < one.state.size(); ++i) {
          EXPECT_TRUE(torch::equal(many.state[i], one.state[i]))
              << nn::to_string(precision) << ", ghost " << ghost << ", " << concurrent
              << " at once, tensor " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace bigbatch
