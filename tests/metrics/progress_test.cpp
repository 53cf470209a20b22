#include "bigbatch/metrics/progress.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/metrics/jsonl_sink.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

metrics::WindowRecord window(int64_t step) {
  metrics::WindowRecord r;
  r.step = step;
  r.total_steps = 30;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.tokens = 4096;
  r.samples = 64;
  r.elapsed_seconds = static_cast<double>(step);
  r.tokens_per_second = 4096;
  return r;
}

TEST(ProgressPrinter, PlainLinesEveryLogEveryStepsAndTheFirstAndLast) {
  std::ostringstream out;
  metrics::ProgressOptions options;
  options.log_every = 10;
  metrics::ProgressPrinter progress(out, options);
  for (int64_t step = 1; step <= 30; ++step)
    progress.on_window(window(step));
  metrics::EvalRecord eval;
  eval.step = 30;
  eval.loss = 2.25;
  progress.on_eval(eval);
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5) << text;  // steps 1,10,20,30 + eval
  EXPECT_NE(text.find("step  1/30 loss 2.5000  lr 1.00e-03  4.10k tok/s  ETA 29s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("step 20/30"), std::string::npos);
  EXPECT_NE(text.find("eval  step 30  val_loss 2.2500  ("), std::string::npos) << text;
  eval.accuracy = 0.9134;
  progress.on_eval(eval);
  EXPECT_NE(out.str().find("val_loss 2.2500  val_acc 91.34%  ("), std::string::npos) << out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(ProgressPrinter, TerminalRedrawsOneLine) {
  std::ostringstream out;
  metrics::ProgressOptions options;
  options.interactive = true;
  metrics::ProgressPrinter progress(out, options);
  progress.on_window(window(15));
  progress.on_finish();
  EXPECT_EQ(out.str(),
            "\r\033[Kstep 15/30 [##########..........] loss 2.5000  lr 1.00e-03  "
            "4.10k tok/s  ETA 15s\n");
}

TEST(ProgressPrinter, ShowsTheLossScaleAndSkippedWindowsButNoLineForASkippedWindow) {
  std::ostringstream out;
  metrics::ProgressOptions options;
  options.log_every = 1;
  metrics::ProgressPrinter progress(out, options);
  metrics::WindowRecord skipped = window(3);
  skipped.skipped = true;
  skipped.skipped_steps = 1;
  skipped.loss_scale = 65536;
  progress.on_window(skipped);
  progress.on_notice("step 3 skipped: non-finite loss (inf)");
  metrics::WindowRecord next = window(3);
  next.skipped_steps = 1;
  next.loss_scale = 32768;
  progress.on_window(next);
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find("note: step 3 skipped: non-finite loss (inf)\nstep  3/30 loss 2.5000"), 0u)
      << text;
  EXPECT_NE(text.find("ETA 27s  scale 32768  skipped 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("65536"), std::string::npos) << text;
}

TEST(JsonlSink, OneObjectPerLine) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "metrics.jsonl").string();
  {
    metrics::JsonlSink sink(path);
    sink.on_window(window(1));
    metrics::WindowRecord skipped = window(2);
    skipped.loss = std::numeric_limits<double>::quiet_NaN();
    skipped.skipped = true;
    skipped.skip_reason = "nonfinite_loss";
    skipped.skipped_steps = 1;
    skipped.loss_scale = 1024;
    sink.on_window(skipped);
    metrics::EvalRecord eval;
    eval.step = 1;
    eval.loss = 3.0;
    sink.on_eval(eval);
    eval.accuracy = 0.875;
    sink.on_eval(eval);
  }
  std::istringstream lines(testing::read_file(path));
  std::string line;
  std::getline(lines, line);
  const auto first = nlohmann::json::parse(line);
  EXPECT_EQ(first["type"], "window");
  EXPECT_EQ(first["step"], 1);
  EXPECT_EQ(first["tokens"], 4096);
  EXPECT_EQ(first["skipped"], false);
  EXPECT_EQ(first["skip_reason"], "");
  EXPECT_EQ(first["loss_scale"], 0.0);
  std::getline(lines, line);
  const auto second = nlohmann::json::parse(line);
  EXPECT_EQ(second["skipped"], true);
  EXPECT_EQ(second["skip_reason"], "nonfinite_loss");
  EXPECT_EQ(second["skipped_steps"], 1);
  EXPECT_EQ(second["loss_scale"], 1024.0);
  EXPECT_TRUE(second["loss"].is_null());
  std::getline(lines, line);
  EXPECT_EQ(nlohmann::json::parse(line)["type"], "eval");
  EXPECT_FALSE(nlohmann::json::parse(line).contains("accuracy"));
  std::getline(lines, line);
  EXPECT_EQ(nlohmann::json::parse(line)["accuracy"], 0.875);
  EXPECT_THROW(metrics::JsonlSink("/nonexistent/dir/metrics.jsonl"), std::runtime_error);
}

}  // namespace
}  // namespace bigbatch
