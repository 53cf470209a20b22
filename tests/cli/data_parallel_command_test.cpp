// `bigbatch train --nproc 2` as a user runs it: the same run as one process, a rank killed or
// stopped mid-run, a stopped job resumed exactly, and the environment torchrun sets.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/checkpoint_tensors.h"
#include "cli/child_process.h"
#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The process whose parent is `parent` and whose environment holds RANK=`rank`; -1 if none.
pid_t rank_process(pid_t parent, int64_t rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream fields(line.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent)
      continue;
    std::ifstream environ_file(entry.path() / "environ", std::ios::binary);
    const std::string environ_text((std::istreambuf_iterator<char>(environ_file)),
                                   std::istreambuf_iterator<char>());
    if (environ_text.find(std::string("RANK=") + std::to_string(rank) + '\0') == 0 ||
        environ_text.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') !=
            std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

bool process_exists(pid_t pid) {
  return fs::exists("/proc/" + std::to_string(pid));
}

/// Losses by step ("window") and evaluation losses by step ("eval") of a metrics file.
std::map<std::string, std::map<int64_t, double>> losses_of(const std::string& path) {
  std::map<std::string, std::map<int64_t, double>> losses;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] == "window" || record["type"] == "eval")
      losses[record["type"]][record["step"].get<int64_t>()] = record["loss"].get<double>();
  }
  return losses;
}

/// The model tensors of a checkpoint file, flattened into one.
torch::Tensor checkpoint_weights(const std::string& path) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& tensor : model_tensors(path))
    flat.push_back(tensor.flatten());
  return torch::cat(flat);
}

class DataParallelCommand : public ::testing::Test {
 protected:
  void SetUp() override { corpus_ = dir_.write("corpus.txt", small_corpus()); }
  /// `bigbatch train` of the tiny GPT on `nproc` ranks (1: a single process).
  std::string job(const std::string& run_dir, const std::string& extra = "", int nproc = 1) const {
    return "train " + (nproc > 1 ? "--nproc " + std::to_string(nproc) + " " : std::string()) +
           "-s data.path='" + corpus_.string() + "' " + tiny_gpt_settings() +
           " -s dist.timeout=5 " + extra + " --run-dir " + run_dir;
  }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  /// Starts a long 2-rank job, waits for its first checkpoint, does `act(rank 1's pid)`, and
  /// returns the launcher's exit code, its output and the seconds from `act` to its exit.
  std::tuple<int, std::string, double> disturb_rank_one(const std::string& name, int signal) {
    const std::string run_dir = path(name);
    const std::string log = path(name + ".log");
    Child launcher(job(run_dir, "-s train.steps=100000", 2), log);
    const auto started = Clock::now();
    while (launcher.running() && !fs::exists(run_dir + "/checkpoints/step-00000002.ckpt") &&
           seconds_since(started) < 120)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const pid_t rank_one = rank_process(launcher.pid(), 1);
    EXPECT_GT(rank_one, 0) << testing::read_file(log);
    ::kill(rank_one, signal);
    const auto disturbed = Clock::now();
    const int code = launcher.wait();
    const double seconds = seconds_since(disturbed);
    EXPECT_FALSE(process_exists(rank_one)) << "rank 1 outlived the launcher";
    return {code, testing::read_file(log), seconds};
  }

  testing::TempDir dir_;
  fs::path corpus_;
};

TEST_F(DataParallelCommand, TwoRanksTrainLikeOneProcessInFloat64) {
  const std::string float64 = "-s model.dtype=float64 -s train.steps=6";
  const Result one = run(job(path("one"), float64));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const Result pair = run(job(path("pair"), float64, 2));
  ASSERT_EQ(pair.exit_code, 0) << pair.output;
  EXPECT_NE(pair.output.find("launching 2 ranks on this machine"), std::string::npos)
      << pair.output;
  EXPECT_NE(pair.output.find("processes (data parallel): 16 = 8 x 1 x 2"), std::string::npos)
      << pair.output;
  const auto single = losses_of(path("one") + "/metrics.jsonl");
  const auto parallel = losses_of(path("pair") + "/metrics.jsonl");
  ASSERT_EQ(single.at("window").size(), 6u);
  ASSERT_EQ(parallel.at("window").size(), 6u);
  ASSERT_EQ(parallel.at("eval").size(), single.at("eval").size());
  for (const auto& [kind, by_step] : single) {
    for (const auto& [step, loss] : by_step)
      EXPECT_NEAR(parallel.at(kind).at(step), loss, 1e-9 * loss) << kind << " step " << step;
  }
  const torch::Tensor a = checkpoint_weights(path("one") + "/checkpoints/step-00000006.ckpt");
  const torch::Tensor b = checkpoint_weights(path("pair") + "/checkpoints/step-00000006.ckpt");
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-9 * a.abs().max().item<double>());
  // Only rank 0 writes the run directory.
  EXPECT_TRUE(fs::exists(path("pair") + "/summary.json"));
}

TEST_F(DataParallelCommand, AKilledRankStopsTheJobNamingIt) {
  const auto [code, output, seconds] = disturb_rank_one("killed", SIGKILL);
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("bigbatch: rank 1 (pid"), std::string::npos) << output;
  EXPECT_NE(output.find("was killed by signal 9"), std::string::npos) << output;
  EXPECT_NE(output.find("rank 0 of 2: "), std::string::npos) << output;
  EXPECT_NE(output.find("rank 1 stopped responding"), std::string::npos) << output;
  EXPECT_LT(seconds, 5.0 + 10.0) << output;
}

TEST_F(DataParallelCommand, AStoppedRankFailsTheOthersWithinTheTimeout) {
  const auto [code, output, seconds] = disturb_rank_one("stopped", SIGSTOP);
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("rank 0 of 2: "), std::string::npos) << output;
  EXPECT_NE(output.find("failed after"), std::string::npos) << output;
  EXPECT_NE(output.find("(dist.timeout = 5 s)"), std::string::npos) << output;
  EXPECT_NE(output.find("rank 1 stopped responding"), std::string::npos) << output;
  EXPECT_LT(seconds, 5.0 + 10.0) << output;
}

TEST_F(DataParallelCommand, AStoppedTwoRankJobResumesToTheSameEndWithDropout) {
  const std::string settings = "-s gpt.dropout=0.1 -s train.steps=12 -s checkpoint.every=1";
  const Result whole = run(job(path("whole"), settings, 2));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  const std::string run_dir = path("interrupted");
  const std::string log = path("interrupted.log");
  Child launcher(job(run_dir, settings, 2), log);
  while (launcher.running() && !fs::exists(run_dir + "/checkpoints/step-00000003.ckpt"))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  launcher.kill(SIGTERM);
  const int code = launcher.wait();
  if (code == 0)
    GTEST_SKIP() << "the job finished before the signal arrived";
  ASSERT_EQ(code, 128 + SIGTERM) << testing::read_file(log);
  const std::string output = testing::read_file(log);
  EXPECT_NE(output.find("resume with: bigbatch train --nproc 2 --resume " + run_dir),
            std::string::npos)
      << output;

  const Result alone = run("train --resume " + run_dir);
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("was saved by 2 process(es); this run has 1"), std::string::npos)
      << alone.output;

  const Result resumed = run("train --nproc 2 --resume " + run_dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::string last = "/checkpoints/step-00000012.ckpt";
  EXPECT_TRUE(
      torch::equal(checkpoint_weights(run_dir + last), checkpoint_weights(path("whole") + last)));
  EXPECT_EQ(losses_of(run_dir + "/metrics.jsonl"), losses_of(path("whole") + "/metrics.jsonl"));
}

TEST_F(DataParallelCommand, TorchrunsEnvironmentIsCheckedBeforeAnythingRuns) {
  const Result no_rank = run_shell("WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 " +
                                   std::string(BIGBATCH_CLI_PATH) + " " + job(path("env")));
  EXPECT_EQ(no_rank.exit_code, 2) << no_rank.output;
  EXPECT_NE(no_rank.output.find("WORLD_SIZE=2 is set but RANK is not"), std::string::npos)
      << no_rank.output;
  const Result both = run_shell("WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 " +
                                std::string(BIGBATCH_CLI_PATH) + " train --nproc 2");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("under torchrun (or with RANK/WORLD_SIZE set) leave --nproc out"),
            std::string::npos)
      << both.output;
  const Result odd = run(job(path("odd"), "", 3));
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_EQ(odd.output.find("launching"), std::string::npos) << "checked before launching";
  EXPECT_NE(odd.output.find("does not split evenly over 3 processes"), std::string::npos)
      << odd.output;
}

}  // namespace
}  // namespace bigbatch
