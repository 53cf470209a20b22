// `bigbatch plot` on real runs: one run, several runs overlaid, and the errors a user meets.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

using testing::count_occurrences;

/// Whether xmllint (Debian's libxml2-utils) finds the file well-formed XML.
void expect_well_formed(const fs::path& svg) {
  const std::string command = "xmllint --noout '" + svg.string() + "' 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << svg;
}

class PlotCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    const fs::path corpus = dir_->write("corpus.txt", small_corpus());
    for (const char* name : {"run-a", "run-b"}) {
      const Result r = run("train -s data.path='" + corpus.string() + "' " + tiny_gpt_settings() +
                           " -s optim.lr=" + (name == std::string("run-a") ? "0.001" : "0.003") +
                           " --steps 4 --run-dir '" + (dir_->path() / name).string() + "'");
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string path(const std::string& name) { return (dir_->path() / name).string(); }
  static testing::TempDir* dir_;
};

testing::TempDir* PlotCommand::dir_ = nullptr;

TEST_F(PlotCommand, TrainWroteItsChartsAndPlotRedrawsThemForOneRun) {
  for (const char* name : {"loss.svg", "accuracy.svg", "lr.svg", "memory.svg", "throughput.svg"})
    EXPECT_TRUE(fs::exists(fs::path(path("run-a")) / "charts" / name)) << name;
  const std::string out = path("one");
  const Result r = run("plot '" + path("run-a") + "' --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("written: " + out + "/loss.svg"), std::string::npos) << r.output;
  for (const char* name : {"loss.svg", "lr.svg", "memory.svg", "throughput.svg"}) {
    const fs::path svg = fs::path(out) / name;
    ASSERT_TRUE(fs::exists(svg)) << name;
    expect_well_formed(svg);
    const std::string text = testing::read_file(svg);
    EXPECT_EQ(text.rfind("<?xml", 0), 0u);
    EXPECT_NE(text.find("bigbatch run run-a"), std::string::npos);
  }
  expect_well_formed(fs::path(out) / "accuracy.svg");  // the GPT's next-byte accuracy
  const std::string loss = testing::read_file(fs::path(out) / "loss.svg");
  EXPECT_EQ(count_occurrences(loss, "<polyline"), 2u);
  EXPECT_NE(loss.find(">train</text>"), std::string::npos) << loss;
  EXPECT_NE(loss.find(">validation</text>"), std::string::npos);
  EXPECT_EQ(count_occurrences(loss, "<circle"), 4u + 3u);  // steps 1-4, evaluations at 0, 2, 4
  EXPECT_NE(testing::read_file(fs::path(out) / "throughput.svg").find("tokens per second"),
            std::string::npos);
  EXPECT_EQ(testing::read_file(fs::path(path("run-a")) / "charts" / "loss.svg"), loss);
}

TEST_F(PlotCommand, SeveralRunsAreOverlaidWithALegend) {
  const std::string out = path("both");
  const Result r = run("plot '" + path("run-a") + "' '" + path("run-b") + "/' --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"loss.svg", "lr.svg", "memory.svg", "throughput.svg"}) {
    const fs::path svg = fs::path(out) / name;
    expect_well_formed(svg);
    const std::string text = testing::read_file(svg);
    EXPECT_NE(text.find("bigbatch runs run-a, run-b"), std::string::npos) << name;
    EXPECT_EQ(count_occurrences(text, "<polyline"), name == std::string("loss.svg") ? 4u : 2u)
        << name;
  }
  const std::string loss = testing::read_file(fs::path(out) / "loss.svg");
  for (const char* legend :
       {">run-a train<", ">run-a validation<", ">run-b train<", ">run-b validation<"})
    EXPECT_NE(loss.find(legend), std::string::npos) << legend;
  const std::string lr = testing::read_file(fs::path(out) / "lr.svg");
  EXPECT_NE(lr.find(">run-a</text>"), std::string::npos);
  EXPECT_NE(lr.find(">run-b</text>"), std::string::npos);
}

TEST_F(PlotCommand, MissingDirectoryOrMetricsIsNamed) {
  const Result missing =
      run("plot '" + path("run-a") + "' '" + path("nope") + "' --out '" + path("never") + "'");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("error: no run directory " + path("nope") + ": it does not exist"),
            std::string::npos)
      << missing.output;
  EXPECT_FALSE(fs::exists(path("never")));

  fs::create_directories(path("empty"));
  const Result empty = run("plot '" + path("empty") + "'");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.output.find("error: " + path("empty") + " holds no metrics.jsonl (" +
                              path("empty") + "/metrics.jsonl)"),
            std::string::npos)
      << empty.output;
  EXPECT_FALSE(fs::exists(fs::path(path("empty")) / "charts"));

  const Result none = run("plot");
  EXPECT_EQ(none.exit_code, 2);
}

}  // namespace
}  // namespace bigbatch
