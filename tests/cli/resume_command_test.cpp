// `bigbatch train` killed at any moment, resumed, ends bitwise where an uninterrupted run ends;
// bad checkpoints, changed configs, a full disk and stop signals, as a user meets them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bigbatch/io/checkpoint_file.h"
#include "cli/checkpoint_tensors.h"
#include "cli/child_process.h"
#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// A tiny GPT with dropout (the random generators matter) and prefetching, 80 steps over about
/// two epochs of the small corpus, a checkpoint every step.
const char* kJob =
    "-s gpt.layers=1 -s gpt.embed=16 -s gpt.heads=2 -s gpt.context=16 -s gpt.dropout=0.1 "
    "-s batch.global_batch=32 -s batch.micro_batch=8 -s data.split_block=512 "
    "-s train.eval_every=10 -s train.eval_samples=32 -s train.threads=1 -s train.blas_threads=1 "
    "-s sample.bytes=20 -s checkpoint.every=1 -s checkpoint.keep=2 -s train.steps=80";

/// Window losses by step from a metrics file; fails on a step listed twice.
std::map<int64_t, double> window_losses(const std::string& path) {
  std::map<int64_t, double> losses;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] != "window")
      continue;
    const int64_t step = record["step"].get<int64_t>();
    EXPECT_EQ(losses.count(step), 0u) << "step " << step << " listed twice in " << path;
    losses[step] = record["loss"].get<double>();
  }
  return losses;
}

class ResumeCommand : public ::testing::Test {
 protected:
  void SetUp() override { corpus_ = dir_.write("corpus.txt", small_corpus()); }
  std::string job(const std::string& run_dir) const {
    return "train -s data.path='" + corpus_.string() + "' " + kJob + " --run-dir " + run_dir;
  }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }
  /// Trains the job without interruption once per test class (in "whole").
  const std::string& whole() {
    if (whole_.empty()) {
      whole_ = path("whole");
      const Result r = run(job(whole_));
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
    return whole_;
  }
  void expect_same_end(const std::string& run_dir) {
    const std::string last = "/checkpoints/step-00000080.ckpt";
    const auto a = model_tensors(whole() + last);
    const auto b = model_tensors(run_dir + last);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "model tensor " << i;
    EXPECT_EQ(window_losses(run_dir + "/metrics.jsonl"), window_losses(whole() + "/metrics.jsonl"));
    const auto summary_a = nlohmann::json::parse(testing::read_file(whole() + "/summary.json"));
    const auto summary_b = nlohmann::json::parse(testing::read_file(run_dir + "/summary.json"));
    EXPECT_EQ(summary_a["sample"], summary_b["sample"]);
    EXPECT_EQ(summary_a["last_val_loss"], summary_b["last_val_loss"]);
    EXPECT_EQ(summary_a["samples"], summary_b["samples"]);
  }

  testing::TempDir dir_;
  fs::path corpus_;
  std::string whole_;
};

bool holds_temporary_file(const std::string& directory) {
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory, error)) {
    if (item.path().filename().string().find(".tmp.") != std::string::npos)
      return true;
  }
  return false;
}

/// The name of the newest finished checkpoint in `directory` ("" when there is none).
std::string newest_checkpoint(const std::string& directory) {
  std::string newest;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory, error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".ckpt") == 0 && name > newest)
      newest = name;
  }
  return newest;
}

TEST_F(ResumeCommand, KilledAtRandomMomentsAndDuringACheckpointWriteResumesBitwise) {
  const std::string run_dir = path("killed");
  const std::string command = job(run_dir) + " --auto-resume";
  const std::string log = path("killed.log");
  // How long the uninterrupted run trained here (start-up excluded): each random kill comes at
  // most an eighth of that after the attempt's first new checkpoint, so that it falls inside
  // training and the next attempt has to resume.
  const double train_seconds =
      nlohmann::json::parse(testing::read_file(whole() + "/summary.json"))["train_seconds"]
          .get<double>();
  std::mt19937 random(20261201);
  std::uniform_real_distribution<double> moment(0.0, train_seconds / 8);
  int kills = 0;
  int kills_during_write = 0;
  // Eight attempts killed (even ones at a random moment, odd ones the moment a checkpoint's
  // temporary file exists, i.e. during a write), then one left to finish.
  for (int attempt = 0; attempt <= 8; ++attempt) {
    Child child(command, log);
    if (attempt < 8 && attempt % 2 == 1) {
      const std::string checkpoints = run_dir + "/checkpoints";
      while (child.running() && !holds_temporary_file(checkpoints))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (child.running()) {
        child.kill(SIGKILL);
        ++kills_during_write;
      }
    } else if (attempt < 8) {
      // The random moment counts from the attempt's first new checkpoint, so that every attempt
      // gets past start-up (which can take most of a run) and the next one has to resume.
      const std::string checkpoints = run_dir + "/checkpoints";
      const std::string before = newest_checkpoint(checkpoints);
      while (child.running() && newest_checkpoint(checkpoints) == before)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const auto until = Clock::now() + std::chrono::duration<double>(moment(random));
      while (child.running() && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (child.running())
        child.kill(SIGKILL);
    }
    const int code = child.wait();
    if (code == 0)
      break;
    ASSERT_EQ(code, 128 + SIGKILL) << testing::read_file(log);
    ++kills;
  }
  EXPECT_GE(kills, 4) << testing::read_file(log);
  EXPECT_GE(kills_during_write, 1) << testing::read_file(log);
  EXPECT_NE(testing::read_file(log).find("resume: from "), std::string::npos)
      << testing::read_file(log);
  expect_same_end(run_dir);
}

TEST_F(ResumeCommand, SigtermStopsAtABoundaryWithACheckpointAndResumeFinishesTheRun) {
  const std::string run_dir = path("stopped");
  const std::string log = path("stopped.log");
  Child child(job(run_dir), log);
  while (child.running() && !fs::exists(run_dir + "/checkpoints/step-00000003.ckpt"))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  child.kill(SIGTERM);
  const int code = child.wait();
  if (code == 0)
    GTEST_SKIP() << "the run finished before the signal arrived";
  ASSERT_EQ(code, 128 + SIGTERM) << testing::read_file(log);
  const std::string output = testing::read_file(log);
  EXPECT_NE(output.find("stopped by signal 15 after optimizer step"), std::string::npos) << output;
  EXPECT_NE(output.find("resume with: bigbatch train --resume " + run_dir), std::string::npos)
      << output;
  EXPECT_FALSE(fs::exists(run_dir + "/summary.json"));
  const Result resumed = run("train --resume " + run_dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_end(run_dir);
  const Result again = run("train --resume " + run_dir);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("finished all 80 steps already; nothing to do"), std::string::npos)
      << again.output;
}

TEST_F(ResumeCommand, ACorruptNewestCheckpointFallsBackAndSaysSo) {
  const std::string run_dir = path("corrupt");
  ASSERT_EQ(run(job(run_dir) + " -s train.steps=6").exit_code, 0);
  fs::remove(run_dir + "/summary.json");  // as if killed after the last checkpoint
  const std::string newest = run_dir + "/checkpoints/step-00000006.ckpt";
  fs::resize_file(newest, fs::file_size(newest) - 10);
  const Result r = run("train --resume " + run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: passed over " + newest + ": truncated: "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("resume: from " + run_dir + "/checkpoints/step-00000005.ckpt"),
            std::string::npos)
      << r.output;
}

TEST_F(ResumeCommand, NoUsableCheckpointIsAClearErrorNamingEachFile) {
  const std::string run_dir = path("broken");
  ASSERT_EQ(run(job(run_dir) + " -s train.steps=4").exit_code, 0);
  std::ofstream(run_dir + "/checkpoints/step-00000003.ckpt", std::ios::trunc) << "garbage";
  std::ofstream(run_dir + "/checkpoints/step-00000004.ckpt", std::ios::trunc) << "BBCKPT\r\n";
  fs::remove(run_dir + "/summary.json");
  const auto start = Clock::now();
  const Result r = run("train --resume " + run_dir);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no usable checkpoint in " + run_dir + "/checkpoints"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step-00000004.ckpt: truncated: 8 bytes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step-00000003.ckpt: truncated: 7 bytes"), std::string::npos) << r.output;
}

TEST_F(ResumeCommand, AChangedPlanIsRefusedNamingTheDifference) {
  const std::string run_dir = path("changed");
  ASSERT_EQ(run(job(run_dir) + " -s train.steps=3 -s checkpoint.every=0").exit_code, 0);
  fs::remove(run_dir + "/summary.json");
  const Result batch = run("train --resume " + run_dir + " -s batch.global_batch=16");
  EXPECT_EQ(batch.exit_code, 2) << batch.output;
  EXPECT_NE(batch.output.find("batch.global_batch: 32 -> 16"), std::string::npos) << batch.output;
  EXPECT_NE(batch.output.find("start it without --resume"), std::string::npos) << batch.output;
  const Result model = run("train --resume " + run_dir + " -s gpt.embed=32");
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_NE(model.output.find("gpt.embed: 16 -> 32"), std::string::npos) << model.output;

  const Result micro = run("train --resume " + run_dir + " -s batch.micro_batch=4");
  EXPECT_EQ(micro.exit_code, 2) << micro.output;
  EXPECT_NE(micro.output.find("pass --allow-changes"), std::string::npos) << micro.output;
  const Result allowed =
      run("train --resume " + run_dir + " -s batch.micro_batch=4 -s train.steps=5 --allow-changes");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("resumed with batch.micro_batch: 8 -> 4"), std::string::npos)
      << allowed.output;
  EXPECT_NE(allowed.output.find("8 x 4"), std::string::npos) << allowed.output;  // the new split

  const Result free = run("train --resume " + run_dir + " -s train.steps=6 --allow-changes " +
                          "-s train.log_every=1");
  EXPECT_EQ(free.exit_code, 0) << free.output;
}

TEST_F(ResumeCommand, ResumeNeedsARunDirectory) {
  const Result missing = run("train --resume " + path("nothing"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find(path("nothing") + " is not a bigbatch run directory"),
            std::string::npos)
      << missing.output;
  const Result with_config = run("train --resume " + path("nothing") + " -c x.toml");
  EXPECT_EQ(with_config.exit_code, 2) << with_config.output;
  EXPECT_NE(with_config.output.find("change keys with --set, not --config"), std::string::npos);
}

TEST_F(ResumeCommand, AFullDiskFailsTheSaveNamingThePathAndKeepsThePreviousCheckpoint) {
  const std::string run_dir = path("full");
  ASSERT_EQ(run(job(run_dir) + " -s train.steps=4").exit_code, 0);
  fs::remove(run_dir + "/summary.json");
  const auto checkpoint_bytes = fs::file_size(run_dir + "/checkpoints/step-00000004.ckpt");
  // A file size limit below a checkpoint's size (ulimit counts blocks of 512 or 1024 bytes) lets
  // the small files grow but fails the checkpoint's write as a full disk would (EFBIG there,
  // ENOSPC here).
  const std::string limit = std::to_string(checkpoint_bytes / 1024 / 2);
  const std::string command = "ulimit -f " + limit + "; trap '' XFSZ; exec " +
                              std::string(BIGBATCH_CLI_PATH) + " train --resume " + run_dir +
                              " -s train.steps=6 --allow-changes";
  const Result limited = run_shell(command);
  const std::string& output = limited.output;
  EXPECT_EQ(limited.exit_code, 1) << output;
  EXPECT_NE(output.find("error: cannot write " + run_dir +
                        "/checkpoints/step-00000005.ckpt: File too large"),
            std::string::npos)
      << output;
  // The newest complete checkpoint still loads, and no temporary file is listed.
  const Result resumed = run("train --resume " + run_dir + " -s train.steps=6 --allow-changes");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume: from " + run_dir + "/checkpoints/step-00000004.ckpt"),
            std::string::npos)
      << resumed.output;
}

/// A small tmpfs mounted on a fresh directory while it lives (root only); mounted() is false
/// where mounting is not allowed.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::string& directory, uintmax_t bytes) : directory_(directory) {
    fs::create_directories(directory);
    const std::string command = "mount -t tmpfs -o size=" + std::to_string(bytes) + " tmpfs '" +
                                directory + "' 2>/dev/null";
    mounted_ = std::system(command.c_str()) == 0;
  }
  ~SmallFilesystem() {
    if (mounted_)
      std::system(("umount '" + directory_ + "'").c_str());
  }
  SmallFilesystem(const SmallFilesystem&) = delete;
  SmallFilesystem& operator=(const SmallFilesystem&) = delete;
  bool mounted() const { return mounted_; }

 private:
  std::string directory_;
  bool mounted_ = false;
};

TEST_F(ResumeCommand, ARealFullDiskFailsTheSaveWithNoSpaceLeftAndThePreviousOneStillLoads) {
  const std::string probe = path("probe");
  ASSERT_EQ(run(job(probe) + " -s train.steps=1").exit_code, 0);
  const auto checkpoint_bytes = fs::file_size(probe + "/checkpoints/step-00000001.ckpt");
  // Room for the small files and one checkpoint, not for the second one's temporary file.
  const SmallFilesystem disk(path("disk"), checkpoint_bytes * 3 / 2 + 64 * 1024);
  if (!disk.mounted())
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string run_dir = path("disk") + "/run";
  const Result full = run(job(run_dir) + " -s train.steps=3");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_NE(full.output.find("error: cannot write " + run_dir +
                             "/checkpoints/step-00000002.ckpt: No space left on device"),
            std::string::npos)
      << full.output;
  const Result plan = run("train --resume " + run_dir + " --plan");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("resume: from " + run_dir + "/checkpoints/step-00000001.ckpt"),
            std::string::npos)
      << plan.output;
}

}  // namespace
}  // namespace bigbatch
