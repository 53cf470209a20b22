// `bigbatch train` on a CUDA GPU: the same run as on the CPU, memory from the caching allocator,
// budgets and the micro-batch search there, fp16 and bf16 autocast, and checkpoints that move
// between the GPU and the CPU. Each test skips, saying so, where no GPU is present
// (scripts/gpu-check runs them on a machine with one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TrainOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    BIGBATCH_REQUIRE_GPU();
    corpus_ = dir_.write("corpus.txt", small_corpus());
  }
  /// `bigbatch train` of the tiny GPT on the small corpus for `steps`, with `settings`, into
  /// run directory `name`.
  Result train(const std::string& name, const std::string& settings, int steps = 4) const {
    return run("train -s data.path='" + corpus_.string() + "' " + tiny_gpt_settings() +
               " --steps " + std::to_string(steps) + " " + settings + " --run-dir " +
               run_dir(name));
  }
  std::string run_dir(const std::string& name) const { return (dir_.path() / name).string(); }
  nlohmann::json summary(const std::string& name) const {
    return nlohmann::json::parse(testing::read_file(fs::path(run_dir(name)) / "summary.json"));
  }
  /// The window records of a run's metrics.jsonl.
  std::vector<nlohmann::json> windows(const std::string& name) const {
    std::vector<nlohmann::json> found;
    std::istringstream metrics(testing::read_file(fs::path(run_dir(name)) / "metrics.jsonl"));
    std::string line;
    while (std::getline(metrics, line)) {
      const auto record = nlohmann::json::parse(line);
      if (record["type"] == "window")
        found.push_back(record);
    }
    return found;
  }

  testing::TempDir dir_;
  fs::path corpus_;
};

TEST_F(TrainOnGpu, TheSameRunAsOnTheCpuToFloatTolerance) {
  const Result gpu = train("gpu", "-s train.device=cuda");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  EXPECT_THAT(gpu.output, HasSubstr("cuda:0 ("));
  const Result cpu = train("cpu", "-s train.device=cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const std::vector<nlohmann::json> a = windows("gpu"), b = windows("cpu");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    // The same data, initial weights and dropout-free model: only the kernels' rounding differs.
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-4) << "window " << i;
  }
  EXPECT_NEAR(summary("gpu")["last_val_loss"].get<double>(),
              summary("cpu")["last_val_loss"].get<double>(), 1e-4);
}

TEST_F(TrainOnGpu, PeakMemoryIsTheCachingAllocatorsAndGrowsWithTheMicroBatch) {
  ASSERT_EQ(train("small", "-s train.device=cuda -s batch.micro_batch=2").exit_code, 0);
  ASSERT_EQ(train("large", "-s train.device=cuda -s batch.micro_batch=16").exit_code, 0);
  const int64_t small = summary("small")["peak_bytes"].get<int64_t>();
  const int64_t large = summary("large")["peak_bytes"].get<int64_t>();
  EXPECT_GT(small, 0);
  EXPECT_GT(large, small);
  for (const nlohmann::json& window : windows("small"))
    EXPECT_GT(window["peak_bytes"].get<int64_t>(), 0);
}

TEST_F(TrainOnGpu, AutoMicroBatchFitsTheBudgetOnTheGpu) {
  const Result r = train("auto",
                         "-s train.device=cuda -s batch.micro_batch=auto "
                         "-s memory.budget=1GiB",
                         2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("micro_batch auto"));
  EXPECT_THAT(r.output, HasSubstr("tensor memory on cuda:0"));
  EXPECT_LE(summary("auto")["peak_bytes"].get<int64_t>(), int64_t{1} << 30);
}

TEST_F(TrainOnGpu, Fp16WithTheLossScalerAndBf16Train) {
  const Result fp16 = train("fp16", "-s train.device=cuda -s model.precision=fp16");
  ASSERT_EQ(fp16.exit_code, 0) << fp16.output;
  EXPECT_GT(summary("fp16")["final_loss_scale"].get<double>(), 0.0);
  EXPECT_EQ(summary("fp16")["steps"], 4);
  const Result bf16 = train("bf16", "-s train.device=cuda -s model.precision=bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_TRUE(summary("bf16")["final_loss_scale"].is_null());
  EXPECT_LT(summary("bf16")["last_val_loss"].get<double>(),
            summary("bf16")["first_val_loss"].get<double>());
}

TEST_F(TrainOnGpu, ACheckpointSavedOnTheGpuResumesOnTheCpu) {
  ASSERT_EQ(train("moved", "-s train.device=cuda").exit_code, 0);
  // Back to step 2, as if the run had stopped there, then on to step 4 on the CPU.
  fs::remove(fs::path(run_dir("moved")) / "checkpoints" / "step-00000004.ckpt");
  fs::remove(fs::path(run_dir("moved")) / "summary.json");
  const Result resumed = run("train --resume " + run_dir("moved") + " -s train.device=cpu");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("step-00000002.ckpt"));
  EXPECT_EQ(summary("moved")["steps"], 4);
  // And the export of a GPU run reads on any machine.
  const Result exported =
      run("export " + run_dir("moved") + " --out " + (dir_.path() / "export").string());
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
}

TEST_F(TrainOnGpu, AnIndexOutOfRangeExitsWith2) {
  const Result r = train("bad", "-s train.device=cuda:99");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("train.device = \"cuda:99\": the index is out of range"));
  EXPECT_FALSE(fs::exists(run_dir("bad")));
}

}  // namespace
}  // namespace bigbatch
