// The TensorBoard event files `bigbatch train` writes, decoded with protoc, and a resumed run's.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "cli/cli_support.h"
#include "metrics/tfevents_decoder.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

/// The scalars of every event of a file by step: tag -> value.
std::map<int64_t, std::map<std::string, float>> scalars_by_step(
    const std::vector<testing::DecodedEvent>& events) {
  std::map<int64_t, std::map<std::string, float>> by_step;
  for (const testing::DecodedEvent& e : events) {
    for (const auto& [tag, value] : e.scalars)
      by_step[e.step][tag] = value;
  }
  return by_step;
}

TEST(TrainEvents, EveryStepAndEvaluationIsInTheEventFileAndAResumeStartsANewOne) {
  const testing::TempDir dir;
  const fs::path corpus = dir.write("corpus.txt", small_corpus());
  const std::string run_dir = (dir.path() / "run").string();
  const Result r = run("train -s data.path='" + corpus.string() + "' " + tiny_gpt_settings() +
                       " --steps 4 --run-dir '" + run_dir + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<fs::path> files = testing::event_files(run_dir);
  ASSERT_EQ(files.size(), 1u);
  std::vector<testing::DecodedEvent> events = testing::decode_tfevents(files[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  auto by_step = scalars_by_step(events);
  EXPECT_EQ(by_step.size(), 5u);  // steps 0 (the first evaluation) to 4
  EXPECT_TRUE(by_step[0].count("val/loss"));
  for (int64_t step = 1; step <= 4; ++step) {
    for (const char* tag :
         {"train/loss", "train/lr", "train/grad_norm", "train/skipped_steps",
          "throughput/samples_per_second", "throughput/tokens_per_second", "memory/peak_mib"})
      EXPECT_TRUE(by_step[step].count(tag)) << step << " " << tag;
    EXPECT_GT(by_step[step]["train/loss"], 0.0f);
    EXPECT_EQ(by_step[step].count("train/loss_scale"), 0u);  // no loss scaling on CPU
  }
  EXPECT_TRUE(by_step[2].count("val/loss"));
  EXPECT_TRUE(by_step[4].count("val/loss"));

  // Resuming from the step-4 checkpoint for two more steps starts a second file, whose
  // SessionLog START at step 5 tells TensorBoard that what follows replaces any later steps.
  const Result resumed = run("train --resume '" + run_dir + "' -s train.steps=6 --allow-changes");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  files = testing::event_files(run_dir);
  ASSERT_EQ(files.size(), 2u);
  events = testing::decode_tfevents(files[1]);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].session_status, 1) << events[1].text;
  EXPECT_EQ(events[1].step, 5);
  by_step = scalars_by_step(events);
  std::set<int64_t> steps;
  for (const auto& [step, scalars] : by_step)
    steps.insert(step);
  EXPECT_EQ(steps, (std::set<int64_t>{5, 6})) << events.size();
  EXPECT_TRUE(by_step[6].count("val/loss"));
}

}  // namespace
}  // namespace bigbatch
