// job/training_job: a whole run of a workload defined here (no TOML): its run directory, its
// records, resuming a stopped run to the same losses as one that never stopped, epochs, the plan
// alone, extra sinks and bad input that leaves nothing behind.
#include "bigbatch/job/training_job.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/core/threads.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/metrics/jsonl_reader.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

/// 96 random samples of 6 features in 4 classes (the class is the arg-max of the first four
/// features, so the MLP can learn it), drawn from a fixed seed.
class FourClasses : public data::Dataset {
 public:
  explicit FourClasses(int64_t samples) {
    const torch::Generator generator = at::detail::createCPUGenerator(17);
    inputs_ = torch::randn({samples, 6}, generator, torch::kFloat64);  // (N, 6)
    targets_ = inputs_.slice(1, 0, 4).argmax(1);                       // (N)
  }
  int64_t size() const override { return inputs_.size(0); }
  data::Batch get(const std::vector<int64_t>& indices) const override {
    const torch::Tensor at = torch::tensor(indices, torch::kLong);
    return {inputs_.index_select(0, at), targets_.index_select(0, at)};
  }
  std::string describe() const override { return std::to_string(size()) + " samples"; }

 private:
  torch::Tensor inputs_;
  torch::Tensor targets_;
};

job::Workload four_class_workload() {
  job::Workload w;
  auto model =
      torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
  model->to(torch::kFloat64);
  w.module = model.ptr();
  w.train = std::make_shared<FourClasses>(96);
  w.val = std::make_shared<FourClasses>(32);
  w.objective = std::make_unique<engine::CrossEntropyObjective>(
      [model](const torch::Tensor& x) mutable { return model->forward(x); },
      engine::LossUnit::kSample);
  w.name = "four-classes";
  return w;
}

/// 32 samples per step as 3 micro-batches (12 + 12 + 8), 8 steps, a checkpoint every 2.
job::TrainingJobOptions small_options(const fs::path& run_dir) {
  job::TrainingJobOptions options;
  options.batch.global_batch(32).micro_batch(12).base_lr(0.05);
  options.trainer.total_steps(8).eval_every(4).checkpoint_every(2).max_grad_norm(1.0).seed(5);
  options.schedule.warmup_steps(2);
  options.run.directory = run_dir.string();
  options.run.config_text = "# the caller's description of the run\n";
  return options;
}

job::JobResult run_job(const job::TrainingJobOptions& options, std::string* output = nullptr) {
  std::ostringstream out;
  job::TrainingJob job(options, four_class_workload);
  job::JobResult result = job.run(out);
  if (output != nullptr)
    *output = out.str();
  return result;
}

std::vector<double> window_losses(const fs::path& run_dir) {
  const std::string path = (run_dir / "metrics.jsonl").string();
  std::vector<double> losses;
  for (const metrics::WindowRecord& w :
       metrics::parse_metrics_jsonl(io::read_file(path), path).windows)
    losses.push_back(w.loss);
  return losses;
}

TEST(TrainingJob, WritesAFinishedRunDirectory) {
  const testing::TempDir dir;
  const fs::path run_dir = dir.path() / "run";
  std::string output;
  const job::JobResult result = run_job(small_options(run_dir), &output);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.run_dir, run_dir.string());
  EXPECT_EQ(result.summary.steps, 8);
  EXPECT_NE(output.find("bigbatch plan"), std::string::npos) << output;
  EXPECT_NE(output.find("finished 8 steps"), std::string::npos) << output;
  for (const char* file : {"config.toml", "plan.txt", "metrics.jsonl", "summary.json",
                           "charts/loss.svg", "checkpoints"})
    EXPECT_TRUE(fs::exists(run_dir / file)) << file;
  EXPECT_EQ(io::read_file((run_dir / "config.toml").string()),
            "# the caller's description of the run\n");
  const nlohmann::json summary =
      nlohmann::json::parse(io::read_file((run_dir / "summary.json").string()));
  EXPECT_EQ(summary.at("steps"), 8);
  EXPECT_EQ(summary.at("final_micro_batch"), 12);
  const std::vector<double> losses = window_losses(run_dir);
  ASSERT_EQ(losses.size(), 8u);
  EXPECT_LT(losses.back(), losses.front());  // it learned
  EXPECT_LT(result.summary.last_val_loss, result.summary.first_val_loss);
}

TEST(TrainingJob, ASampleThatFailsIsReportedAndTheRunStillFinishes) {
  const testing::TempDir dir;
  const fs::path run_dir = dir.path() / "run";
  job::TrainingJobOptions options = small_options(run_dir);
  options.trainer.total_steps(2).checkpoint_every(0);
  const auto failing_sample = [] {
    job::Workload w = four_class_workload();
    w.generate_sample = []() -> std::string {
      C10_THROW_ERROR(IndexError, "index 510 is out of bounds");  // a LibTorch error
    };
    w.sample_heading = "sample";
    return w;
  };
  std::ostringstream out;
  const job::JobResult result = job::TrainingJob(options, failing_sample).run(out);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(out.str().find("note: no sample: index 510 is out of bounds\n"), std::string::npos)
      << out.str();
  EXPECT_EQ(out.str().find("Exception raised from"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("finished 2 steps"), std::string::npos) << out.str();
  EXPECT_TRUE(fs::exists(run_dir / "summary.json"));
  EXPECT_TRUE(fs::exists(run_dir / "charts/loss.svg"));
}

/// Raises SIGTERM after optimizer step `at`, as a user's Ctrl-C or a scheduler's stop would.
class SignalAfterStep : public metrics::MetricsSink {
 public:
  explicit SignalAfterStep(int64_t at) : at_(at) {}
  void on_window(const metrics::WindowRecord& record) override {
    if (record.step == at_)
      std::raise(SIGTERM);
  }
  void on_eval(const metrics::EvalRecord&) override {}

 private:
  int64_t at_;
};

TEST(TrainingJob, StoppedRunResumesToTheLossesOfOneThatNeverStopped) {
  const testing::TempDir dir;
  run_job(small_options(dir.path() / "straight"));
  const std::vector<double> straight = window_losses(dir.path() / "straight");
  // The same run stopped by SIGTERM after step 3: it saves a checkpoint at that boundary.
  job::TrainingJobOptions options = small_options(dir.path() / "resumed");
  options.run.resume_command = [](const std::string& run_dir) { return "resume " + run_dir; };
  SignalAfterStep signal(3);
  std::ostringstream out;
  job::TrainingJob first(options, four_class_workload);
  first.add_sink(&signal);
  const job::JobResult stopped = first.run(out);
  EXPECT_EQ(stopped.exit_code, 128 + SIGTERM);
  EXPECT_EQ(stopped.summary.steps, 3);
  EXPECT_NE(out.str().find("stopped by signal 15 after optimizer step 3"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("resume with: resume " + (dir.path() / "resumed").string()),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "resumed" / "summary.json"));
  // Continued from that checkpoint, with the same options.
  options.run.resume_dir = (dir.path() / "resumed").string();
  std::string output;
  const job::JobResult result = run_job(options, &output);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.summary.steps, 8);
  EXPECT_NE(output.find("resume: from"), std::string::npos) << output;
  EXPECT_EQ(window_losses(dir.path() / "resumed"), straight);  // bitwise, step by step
  // Resuming a finished run does nothing.
  const job::JobResult again = run_job(options, &output);
  EXPECT_EQ(again.summary.steps, 0);
  EXPECT_NE(output.find("finished all 8 steps already"), std::string::npos) << output;
}

TEST(TrainingJob, EpochsDecideTheSteps) {
  const testing::TempDir dir;
  job::TrainingJobOptions options = small_options(dir.path() / "run");
  options.epochs = 2;  // 96 samples in windows of 32: 3 windows per epoch
  EXPECT_EQ(run_job(options).summary.steps, 6);
}

TEST(TrainingJob, PlanOnlyWritesNothing) {
  const testing::TempDir dir;
  job::TrainingJobOptions options = small_options(dir.path() / "run");
  options.run.plan_only = true;
  std::string output;
  const job::JobResult result = run_job(options, &output);
  EXPECT_TRUE(result.run_dir.empty());
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
  EXPECT_NE(output.find("accum_steps"), std::string::npos) << output;
  EXPECT_NE(output.find("(not written)"), std::string::npos) << output;
}

/// Counts the records an extra sink receives.
class CountingSink : public metrics::MetricsSink {
 public:
  void on_window(const metrics::WindowRecord&) override { ++windows; }
  void on_eval(const metrics::EvalRecord&) override { ++evals; }
  int windows = 0;
  int evals = 0;
};

TEST(TrainingJob, ExtraSinksSeeEveryRecord) {
  const testing::TempDir dir;
  CountingSink sink;
  std::ostringstream out;
  job::TrainingJob job(small_options(dir.path() / "run"), four_class_workload);
  job.add_sink(&sink);
  job.run(out);
  EXPECT_EQ(sink.windows, 8);
  EXPECT_EQ(sink.evals, 3);  // before the first step, after step 4 and after step 8
}

TEST(TrainingJob, LossScaleModesAndWhenTheyScale) {
  for (const job::LossScaleMode mode :
       {job::LossScaleMode::kAuto, job::LossScaleMode::kDynamic, job::LossScaleMode::kOff})
    EXPECT_EQ(job::parse_loss_scale_mode(job::to_string(mode), "mode"), mode);
  const std::string message =
      testing::input_error_of([] { job::parse_loss_scale_mode("static", "loss_scale.mode"); });
  EXPECT_NE(message.find("loss_scale.mode = \"static\""), std::string::npos) << message;
  job::TrainingJobOptions options;
  EXPECT_FALSE(job::loss_scaling_enabled(options));  // auto in fp32
  options.precision = nn::Precision::kFp16;
  EXPECT_TRUE(job::loss_scaling_enabled(options));
  options.loss_scale = job::LossScaleMode::kOff;
  EXPECT_FALSE(job::loss_scaling_enabled(options));
}

TEST(TrainingJob, BadInputLeavesNoRunDirectory) {
  const testing::TempDir dir;
  job::TrainingJobOptions options = small_options(dir.path() / "run");
  options.batch.global_batch(128);  // more than the 96 training samples
  const std::string message = testing::input_error_of([&] { run_job(options); });
  EXPECT_NE(message.find("the training split holds 96 samples"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
  const std::string no_module = testing::input_error_of([&] {
    std::ostringstream out;
    job::TrainingJob(small_options(dir.path() / "run"), [] { return job::Workload(); }).run(out);
  });
  EXPECT_NE(no_module.find("the workload has no module"), std::string::npos) << no_module;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
}

TEST(TrainingJob, AutoConcurrencyTrainsAsOnePassAtATime) {
  const testing::TempDir dir;
  job::TrainingJobOptions auto_options = small_options(dir.path() / "auto");
  auto_options.auto_concurrent_micro_batches = true;
  std::string output;
  run_job(auto_options, &output);
  // 3 micro-batches per window: 2 at once wherever the process has 2 cores or more.
  const bool two = available_cores() >= 2;
  EXPECT_NE(output.find(two ? "auto: 2 at once" : "auto: one at a time: 1 core per process"),
            std::string::npos)
      << output;
  run_job(small_options(dir.path() / "one"));
  EXPECT_EQ(window_losses(dir.path() / "auto"), window_losses(dir.path() / "one"));
}

TEST(TrainingJob, ConcurrencyTheWorkloadCannotHaveIsRefusedBeforeAnythingIsWritten) {
  const testing::TempDir dir;
  job::TrainingJobOptions options = small_options(dir.path() / "run");
  options.trainer.concurrent_micro_batches(2);
  const auto drawing = [] {
    job::Workload w = four_class_workload();
    w.concurrency_need = "mlp.dropout = 0, got 0.5";
    return w;
  };
  const std::string message = testing::input_error_of([&] {
    std::ostringstream out;
    job::TrainingJob(options, drawing).run(out);
  });
  EXPECT_NE(message.find("TrainerOptions.concurrent_micro_batches = 2 needs mlp.dropout = 0, got "
                         "0.5"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(dir.path() / "run"));
  // auto takes one pass at a time and says why.
  options.trainer.concurrent_micro_batches(1);
  options.auto_concurrent_micro_batches = true;
  options.run.plan_only = true;
  std::ostringstream out;
  job::TrainingJob(options, drawing).run(out);
  EXPECT_NE(out.str().find("auto: one at a time; passes at once need mlp.dropout = 0"),
            std::string::npos)
      << out.str();
}

}  // namespace
}  // namespace bigbatch
