// `bigbatch bench memory` as a user runs it: the sweep, its files, the budget check, bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

/// A two-block GPT small enough to sweep in seconds.
const char* kSmallGpt =
    "-s gpt.layers=2 -s gpt.embed=32 -s gpt.heads=2 -s gpt.context=32 -s batch.global_batch=16 "
    "-s data.split_block=512 ";

class BenchMemoryCommand : public ::testing::Test {
 protected:
  void SetUp() override { corpus_ = dir_.write("corpus.txt", small_corpus()); }
  std::string corpus_arg() const { return "-s data.path='" + corpus_.string() + "' "; }
  std::string out_dir(const std::string& name) const { return (dir_.path() / name).string(); }

  testing::TempDir dir_;
  fs::path corpus_;
};

/// bench.json's points by (checkpointing, micro-batch).
std::map<std::pair<std::string, int64_t>, nlohmann::json> points_of(const std::string& dir) {
  const auto report = nlohmann::json::parse(testing::read_file(fs::path(dir) / "bench.json"));
  std::map<std::pair<std::string, int64_t>, nlohmann::json> points;
  for (const auto& point : report["points"]) {
    points[{point["checkpointing"].get<std::string>(), point["micro_batch"].get<int64_t>()}] =
        point;
  }
  return points;
}

TEST_F(BenchMemoryCommand, SweepsMicroBatchesAndCheckpointingAndWritesTableJsonAndChart) {
  const std::string out = out_dir("bench");
  const Result r = run("bench memory " + corpus_arg() + kSmallGpt +
                       "--micro-batches 16,2,4 --checkpointing none,blocks --steps 1 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("activations cut"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("8 x 2"), std::string::npos) << r.output;
  for (const char* file : {"table.txt", "bench.json", "memory.svg", "config.toml"})
    EXPECT_TRUE(fs::exists(fs::path(out) / file)) << file;
  EXPECT_NE(testing::read_file(fs::path(out) / "memory.svg").find("checkpointing blocks"),
            std::string::npos);

  EXPECT_EQ(nlohmann::json::parse(testing::read_file(fs::path(out) / "bench.json"))["device"],
            "cpu");
  const auto points = points_of(out);
  ASSERT_EQ(points.size(), 6u);
  for (const auto& [key, point] : points) {
    ASSERT_TRUE(point["fits"].get<bool>()) << key.first << " " << key.second;
    // The split adds up: the peak is weights + gradients + optimizer state + activations.
    EXPECT_EQ(point["peak_bytes"].get<int64_t>(),
              point["parameter_bytes"].get<int64_t>() + point["gradient_bytes"].get<int64_t>() +
                  point["optimizer_state_bytes"].get<int64_t>() +
                  point["activation_bytes"].get<int64_t>());
    EXPECT_GT(point["units_per_second"].get<double>(), 0.0);
  }
  for (const std::string policy : {"none", "blocks"}) {
    // Memory grows with the micro-batch.
    EXPECT_LT(points.at({policy, 2})["peak_bytes"], points.at({policy, 4})["peak_bytes"]);
    EXPECT_LT(points.at({policy, 4})["peak_bytes"], points.at({policy, 16})["peak_bytes"]);
  }
  for (const int64_t micro_batch : {2, 4, 16}) {
    // Checkpointing keeps fewer activations; weights, gradients and state are the same.
    const auto& plain = points.at({"none", micro_batch});
    const auto& checkpointed = points.at({"blocks", micro_batch});
    EXPECT_LT(checkpointed["activation_bytes"], plain["activation_bytes"]) << micro_batch;
    EXPECT_EQ(checkpointed["parameter_bytes"], plain["parameter_bytes"]);
    EXPECT_EQ(checkpointed["optimizer_state_bytes"], plain["optimizer_state_bytes"]);
  }
}

TEST_F(BenchMemoryCommand, UnderABudgetMarksWhatDoesNotFitAndChecksAutoAgainstEverySize) {
  const std::string out = out_dir("budget");
  // Room for a few samples of this model, not for the whole batch of 16.
  const Result r = run("bench memory " + corpus_arg() + kSmallGpt +
                       "-s memory.budget=3MiB --micro-batches 1,4,16 --checkpointing none "
                       "--steps 1 --out " +
                       out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out of memory"), std::string::npos) << r.output;
  const auto points = points_of(out);
  EXPECT_TRUE(points.at({"none", 1})["fits"].get<bool>());
  EXPECT_FALSE(points.at({"none", 16})["fits"].get<bool>());

  const auto report = nlohmann::json::parse(testing::read_file(fs::path(out) / "bench.json"));
  ASSERT_EQ(report["auto"].size(), 1u);
  const auto& check = report["auto"][0];
  const int64_t largest = check["largest_fitting"];
  const int64_t chosen = check["auto_micro_batch"];
  EXPECT_GE(largest, 1);
  EXPECT_LT(largest, 16);
  EXPECT_GE(chosen, 1);
  EXPECT_LE(chosen, largest) << "auto chose a size that does not train";
  EXPECT_TRUE(check["auto_plan_trains"].get<bool>());
  EXPECT_LE(check["out_of_memory_trials"].get<int64_t>(), 3);
}

TEST_F(BenchMemoryCommand, BadInputIsAnInputErrorAndWritesNothing) {
  const std::string out = out_dir("bad");
  struct Case {
    std::string arguments;
    std::string expected;
  };
  const Case cases[] = {
      {"--micro-batches 0,4", "between 1 and batch.global_batch = 16"},
      {"--micro-batches 4,32", "--micro-batches holds 32"},
      {"--checkpointing sometimes", "sometimes"},
      {"--steps 0", "--steps = 0"},
      {"-s model.kind=mlp --checkpointing blocks", "the MLP has no blocks"},
  };
  for (const Case& c : cases) {
    const Result r =
        run("bench memory " + corpus_arg() + kSmallGpt + c.arguments + " --out " + out);
    EXPECT_EQ(r.exit_code, 2) << c.arguments << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.arguments << "\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << c.arguments;
  }
}

}  // namespace
}  // namespace bigbatch
