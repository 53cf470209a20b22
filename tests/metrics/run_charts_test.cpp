// Charts of runs: which files, which series, which colours.
#include "bigbatch/metrics/run_charts.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/test_support.h"

namespace bigbatch {
namespace {

using metrics::ChartFile;
using metrics::RunCurves;

using testing::count_occurrences;

/// A run of `steps` windows (per token when `tokens`), evaluated every 5 steps.
RunCurves run(const std::string& label, int64_t steps, bool tokens, bool accuracy) {
  RunCurves r{label, {}};
  for (int64_t s = 1; s <= steps; ++s) {
    metrics::WindowRecord w;
    w.step = s;
    w.loss = 3.0 / static_cast<double>(s);
    w.lr = 1e-3;
    w.samples = 16;
    w.tokens = tokens ? 256 : 16;
    w.samples_per_second = 100;
    w.tokens_per_second = tokens ? 1600 : 100;
    w.peak_bytes = 4 << 20;
    r.history.windows.push_back(w);
    if (s % 5 == 0)
      r.history.evals.push_back(
          {s, 2.0, 16, 16, 0.1, accuracy ? std::optional(0.5) : std::nullopt});
  }
  return r;
}

const ChartFile& file(const std::vector<ChartFile>& files, const std::string& name) {
  for (const ChartFile& f : files) {
    if (f.name == name)
      return f;
  }
  throw std::runtime_error("no " + name);
}

std::vector<std::string> names(const std::vector<ChartFile>& files) {
  std::vector<std::string> out;
  for (const ChartFile& f : files)
    out.push_back(f.name);
  return out;
}

TEST(RunCharts, TrailingMeanAveragesTheLastPoints) {
  const metrics::Series s = metrics::trailing_mean("m", {1, 2, 3, 4}, {4, 2, 6, 0}, 2);
  EXPECT_EQ(s.name, "m");
  EXPECT_EQ(s.xs, (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(s.ys, (std::vector<double>{3, 4, 3}));
  const metrics::Series short_run = metrics::trailing_mean("m", {1, 2}, {4, 2}, 5);
  EXPECT_EQ(short_run.xs, (std::vector<double>{2}));
  EXPECT_EQ(short_run.ys, (std::vector<double>{3}));
  EXPECT_EQ(metrics::loss_smoothing(99), 1u);
  EXPECT_EQ(metrics::loss_smoothing(300), 6u);
}

TEST(RunCharts, OneRunHasTrainingAndValidationLossLrMemoryAndThroughput) {
  const std::vector<ChartFile> files = metrics::render_run_charts({run("a", 20, true, false)}, "t");
  EXPECT_EQ(names(files),
            (std::vector<std::string>{"loss.svg", "lr.svg", "memory.svg", "throughput.svg"}));
  const std::string& loss = file(files, "loss.svg").svg;
  EXPECT_EQ(count_occurrences(loss, "<polyline"), 2u);
  EXPECT_NE(loss.find(">train</text>"), std::string::npos) << loss;
  EXPECT_NE(loss.find(">validation</text>"), std::string::npos);
  EXPECT_EQ(count_occurrences(loss, "stroke-dasharray"),
            2u);                                       // validation: its line and legend entry
  EXPECT_EQ(count_occurrences(loss, "<circle"), 24u);  // 20 steps + 4 evaluations
  EXPECT_NE(file(files, "throughput.svg").svg.find("tokens per second"), std::string::npos);
  EXPECT_NE(file(files, "memory.svg").svg.find(">4</text>"), std::string::npos);  // 4 MiB tick
}

TEST(RunCharts, SeveralRunsAreOverlaidInTheirOwnColoursWithTheirLabels) {
  const std::vector<ChartFile> files = metrics::render_run_charts(
      {run("gpt-a", 200, true, false), run("resnet-b", 30, false, true)}, "two runs");
  EXPECT_EQ(names(files), (std::vector<std::string>{"loss.svg", "accuracy.svg", "lr.svg",
                                                    "memory.svg", "throughput.svg"}));
  const std::string& loss = file(files, "loss.svg").svg;
  EXPECT_EQ(count_occurrences(loss, "<polyline"), 4u);
  EXPECT_NE(loss.find(">gpt-a train (mean of 4 steps)</text>"), std::string::npos) << loss;
  EXPECT_NE(loss.find(">gpt-a validation</text>"), std::string::npos);
  EXPECT_NE(loss.find(">resnet-b train</text>"), std::string::npos);
  EXPECT_NE(loss.find(">resnet-b validation</text>"), std::string::npos);
  EXPECT_EQ(count_occurrences(loss, "stroke=\"#1f77b4\""),
            4u);  // gpt-a: train and validation, with legend
  EXPECT_EQ(count_occurrences(loss, "stroke=\"#d62728\""), 4u);  // resnet-b
  const std::string& throughput = file(files, "throughput.svg").svg;
  EXPECT_NE(throughput.find("tokens or samples"), std::string::npos);
  EXPECT_NE(throughput.find(">gpt-a (tokens/s)</text>"), std::string::npos);
  EXPECT_NE(throughput.find(">resnet-b (samples/s)</text>"), std::string::npos);
  EXPECT_EQ(count_occurrences(file(files, "lr.svg").svg, "<polyline"), 2u);
}

TEST(RunCharts, SkippedWindowsAreLeftOut) {
  RunCurves r = run("a", 3, true, false);
  r.history.windows[1].skipped = true;
  r.history.windows[1].loss = NAN;
  const std::string lr = file(metrics::render_run_charts({r}, "t"), "lr.svg").svg;
  EXPECT_EQ(count_occurrences(lr, "<circle"), 2u);
}

}  // namespace
}  // namespace bigbatch
