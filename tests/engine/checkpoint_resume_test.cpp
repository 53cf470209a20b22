// Checkpoints at window boundaries: a run stopped and resumed in fresh objects ends bitwise where
// the uninterrupted run ends; bad and foreign checkpoints are refused before anything changes.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>

#include "bigbatch/data/context_dataset.h"
#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/io/checkpoint_file.h"
#include "bigbatch/models/mlp.h"
#include "engine/training_helpers.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using testing::random_bytes;
using testing::RecordingSink;

constexpr int64_t kSteps = 25;

/// Requests a stop once the trainer reports optimizer step `at`.
class StopAtStep : public metrics::MetricsSink {
 public:
  StopAtStep(std::atomic<bool>& flag, int64_t at) : flag_(flag), at_(at) {}
  void on_window(const metrics::WindowRecord& r) override {
    if (r.step == at_)
      flag_.store(true);
  }
  void on_eval(const metrics::EvalRecord&) override {}

 private:
  std::atomic<bool>& flag_;
  int64_t at_;
};

/// Everything one training process holds: an MLP with dropout (the random generator matters),
/// AdamW, a dynamic loss scaler that grows every 3 windows, 16 x 4 windows over 596 samples
/// (10 windows per epoch, the last one short), with prefetching.
struct TrainingProcess {
  explicit TrainingProcess(uint64_t init_seed = 5, int64_t hidden = 32, int64_t global_batch = 64)
      : dataset(random_bytes(600, 3), data::ContextDatasetOptions(4).name("train")),
        model((torch::manual_seed(init_seed),
               models::MlpOptions().context(4).embed(8).hidden(hidden).dropout(0.2))),
        objective(engine::forward_of(model), engine::LossUnit::kSample),
        plan(engine::resolve_plan(
            engine::BatchOptions().global_batch(global_batch).micro_batch(16).base_lr(3e-3))),
        optimizer(engine::make_optimizer(*model,
                                         engine::OptimizerOptions().weight_decay(0.1).lr(plan.lr))),
        schedule(engine::LrScheduleOptions().peak_lr(plan.lr).warmup_steps(5).total_steps(kSteps)),
        scaler(engine::LossScalerOptions().init_scale(256).growth_interval(3)) {
    setup = testing::setup_of(*model, objective, *optimizer, schedule, plan, dataset);
    setup.loss_scaler = &scaler;
  }
  engine::CheckpointParts parts() { return {model.ptr().get(), optimizer.get(), &scaler, &plan}; }
  engine::TrainerOptions options() const {
    return engine::TrainerOptions().total_steps(kSteps).max_grad_norm(0.5).seed(9).checkpoint_every(
        4);
  }
  torch::Tensor weights() const { return testing::flat_parameters(*model); }

  data::ContextDataset dataset;
  models::Mlp model;
  engine::CrossEntropyObjective objective;
  engine::Plan plan;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  engine::LrSchedule schedule;
  engine::LossScaler scaler;
  engine::TrainingSetup setup;
  RecordingSink sink;
};

/// Losses by step of the windows a sink saw.
std::map<int64_t, double> losses(const RecordingSink& sink) {
  std::map<int64_t, double> by_step;
  for (const auto& w : sink.windows)
    by_step[w.step] = w.loss;
  return by_step;
}

class CheckpointResume : public ::testing::Test {
 protected:
  void SetUp() override {
    TrainingProcess whole;
    engine::Trainer trainer(whole.setup, whole.options());
    trainer.add_sink(&whole.sink);
    whole_summary_ = trainer.fit();
    whole_weights_ = whole.weights();
    whole_losses_ = losses(whole.sink);
    whole_scale_ = whole.scaler.scale();
  }
  std::string checkpoints() const { return (dir_.path() / "checkpoints").string(); }

  /// Trains in a fresh process-like TrainingProcess until a stop is requested at `stop_at`.
  void train_until(int64_t stop_at, int64_t keep = 10) {
    TrainingProcess first;
    engine::Checkpointer checkpointer(
        first.parts(), engine::CheckpointOptions().directory(checkpoints()).keep(keep));
    std::atomic<bool> stop{false};
    StopAtStep stopper(stop, stop_at);
    first.setup.checkpoints = &checkpointer;
    first.setup.stop_requested = &stop;
    engine::Trainer trainer(first.setup, first.options());
    trainer.add_sink(&first.sink);
    trainer.add_sink(&stopper);
    const engine::TrainSummary summary = trainer.fit();
    EXPECT_EQ(summary.stopped, stop_at < kSteps);
    EXPECT_EQ(summary.steps, stop_at);
  }

  testing::TempDir dir_;
  engine::TrainSummary whole_summary_;
  torch::Tensor whole_weights_;
  std::map<int64_t, double> whole_losses_;
  double whole_scale_ = 0;
};

TEST_F(CheckpointResume, StoppedAndResumedInFreshObjectsEqualsTheUninterruptedRunBitwise) {
  train_until(13);  // mid-epoch 2, after checkpoints at 4, 8, 12 and the stop at 13
  EXPECT_EQ(engine::list_checkpoints(checkpoints()).size(), 4u);

  TrainingProcess resumed(
      /*init_seed=*/77);     // other initial weights: the checkpoint must replace them
  torch::manual_seed(1234);  // another generator state: the checkpoint must restore it
  const engine::LoadedCheckpoint loaded =
      engine::load_newest_checkpoint(checkpoints(), resumed.parts());
  EXPECT_EQ(fs::path(loaded.path).filename(), "step-00000013.ckpt");
  EXPECT_TRUE(loaded.skipped.empty());
  EXPECT_EQ(loaded.state.summary.steps, 13);
  EXPECT_EQ(loaded.state.windows, 13);
  EXPECT_EQ(loaded.state.data.epoch, 1);
  EXPECT_EQ(loaded.state.data.cursor, 3 * 64);
  engine::Trainer trainer(resumed.setup, resumed.options());
  trainer.resume(loaded.state);
  trainer.add_sink(&resumed.sink);
  const engine::TrainSummary summary = trainer.fit();

  EXPECT_TRUE(torch::equal(resumed.weights(), whole_weights_));
  EXPECT_EQ(resumed.scaler.scale(), whole_scale_);
  ASSERT_EQ(resumed.sink.windows.size(), static_cast<size_t>(kSteps - 13));
  for (const auto& [step, loss] : losses(resumed.sink))
    EXPECT_EQ(loss, whole_losses_.at(step)) << "step " << step;
  EXPECT_EQ(summary.steps, kSteps);
  EXPECT_EQ(summary.samples, whole_summary_.samples);
  EXPECT_EQ(summary.epochs_started, whole_summary_.epochs_started);
  EXPECT_EQ(summary.last_train_loss, whole_summary_.last_train_loss);
}

TEST_F(CheckpointResume, AnOlderCheckpointAlsoResumesExactly) {
  train_until(13);
  TrainingProcess resumed(77);
  const engine::LoadedCheckpoint loaded =
      engine::load_checkpoint(checkpoints() + "/step-00000008.ckpt", resumed.parts());
  engine::Trainer trainer(resumed.setup, resumed.options());
  trainer.resume(loaded.state);
  trainer.add_sink(&resumed.sink);
  trainer.fit();
  EXPECT_TRUE(torch::equal(resumed.weights(), whole_weights_));
  EXPECT_EQ(losses(resumed.sink).begin()->first, 9);
}

TEST_F(CheckpointResume, KeepsTheNewestFilesOnly) {
  train_until(kSteps, /*keep=*/2);
  const std::vector<std::string> files = engine::list_checkpoints(checkpoints());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "step-00000024.ckpt");
  EXPECT_EQ(fs::path(files[1]).filename(), "step-00000025.ckpt");
}

TEST_F(CheckpointResume, ACorruptNewestFileFallsBackToThePreviousOne) {
  train_until(13);
  const std::string newest = checkpoints() + "/step-00000013.ckpt";
  {
    std::fstream file(newest, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-100, std::ios::end);
    file.put('\x5a');
  }
  EXPECT_THROW(engine::read_checkpoint_info(newest), io::CheckpointFileError);
  TrainingProcess resumed(77);
  const engine::LoadedCheckpoint loaded =
      engine::load_newest_checkpoint(checkpoints(), resumed.parts());
  EXPECT_EQ(fs::path(loaded.path).filename(), "step-00000012.ckpt");
  ASSERT_EQ(loaded.skipped.size(), 1u);
  EXPECT_NE(loaded.skipped[0].find(newest), std::string::npos) << loaded.skipped[0];
  EXPECT_NE(loaded.skipped[0].find("corrupt"), std::string::npos) << loaded.skipped[0];
  engine::Trainer trainer(resumed.setup, resumed.options());
  trainer.resume(loaded.state);
  trainer.fit();
  EXPECT_TRUE(torch::equal(resumed.weights(), whole_weights_));
}

TEST_F(CheckpointResume, ALeftoverTemporaryFileIsRemovedAndNeverListed) {
  train_until(5);
  const fs::path leftover = fs::path(checkpoints()) / "step-00000008.ckpt.tmp.4242";
  std::ofstream(leftover) << "half a checkpoint";
  EXPECT_EQ(engine::list_checkpoints(checkpoints()).size(), 2u);
  TrainingProcess next;
  engine::Checkpointer checkpointer(next.parts(),
                                    engine::CheckpointOptions().directory(checkpoints()));
  EXPECT_FALSE(fs::exists(leftover));
}

TEST_F(CheckpointResume, AnotherModelsCheckpointIsRefusedNamingTheTensor) {
  train_until(4);
  TrainingProcess other(5, /*hidden=*/48);
  const torch::Tensor before = other.weights();
  const std::string message = testing::input_error_of(
      [&] { engine::load_newest_checkpoint(checkpoints(), other.parts()); });
  EXPECT_NE(message.find("step-00000004.ckpt is a checkpoint of another model"), std::string::npos)
      << message;
  EXPECT_NE(message.find("[32, 32] Float, this model's is [48, 32] Float"), std::string::npos)
      << message;
  EXPECT_TRUE(torch::equal(other.weights(), before));  // nothing changed
}

TEST_F(CheckpointResume, AnotherGlobalBatchIsRefused) {
  train_until(4);
  TrainingProcess other(5, 32, /*global_batch=*/32);
  const std::string message = testing::input_error_of(
      [&] { engine::load_newest_checkpoint(checkpoints(), other.parts()); });
  EXPECT_NE(message.find("was saved at global batch 64; this run has 32"), std::string::npos)
      << message;
}

TEST_F(CheckpointResume, ARunWithoutALossScalerRefusesACheckpointWithOne) {
  train_until(4);
  TrainingProcess other;
  engine::CheckpointParts parts = other.parts();
  parts.loss_scaler = nullptr;
  const std::string message =
      testing::input_error_of([&] { engine::load_newest_checkpoint(checkpoints(), parts); });
  EXPECT_NE(message.find("was saved with a loss scaler; this run has none"), std::string::npos)
      << message;
}

TEST(CheckpointDirectory, AnEmptyDirectorySaysThereIsNoCheckpoint) {
  testing::TempDir dir;
  TrainingProcess run;
  const std::string message = testing::input_error_of(
      [&] { engine::load_newest_checkpoint(dir.path().string(), run.parts()); });
  EXPECT_NE(message.find("no checkpoint in " + dir.path().string()), std::string::npos) << message;
}

}  // namespace
}  // namespace bigbatch
