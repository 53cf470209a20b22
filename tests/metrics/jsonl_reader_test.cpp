// Reading metrics.jsonl back gives the records JsonlSink wrote.
#include "bigbatch/metrics/jsonl_reader.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/metrics/jsonl_sink.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

TEST(JsonlReader, ReadsBackWhatJsonlSinkWrote) {
  const testing::TempDir dir;
  const std::string path = (dir.path() / "metrics.jsonl").string();
  metrics::WindowRecord window;
  window.step = 3;
  window.total_steps = 10;
  window.epoch = 1;
  window.loss = 2.25;
  window.lr = 1e-3;
  window.grad_norm = 0.5;
  window.clipped = true;
  window.samples = 64;
  window.tokens = 4096;
  window.micro_batches = 8;
  window.peak_bytes = 123456789;
  window.micro_batch = 8;
  window.step_seconds = 0.25;
  window.elapsed_seconds = 1.5;
  window.samples_per_second = 256;
  window.tokens_per_second = 16384;
  window.skipped_steps = 1;
  window.loss_scale = 1024;
  metrics::WindowRecord skipped = window;
  skipped.loss = NAN;
  skipped.skipped = true;
  skipped.skip_reason = "nonfinite_loss";
  {
    metrics::JsonlSink sink(path);
    sink.on_window(window);
    sink.on_window(skipped);
    sink.on_eval({3, 1.75, 32, 2048, 0.125, std::nullopt});
    sink.on_notice("micro-batch halved");
    sink.on_eval({4, 1.5, 32, 32, 0.125, 0.75});
  }
  const metrics::MetricsHistory h =
      metrics::parse_metrics_jsonl(testing::read_file(path), "metrics.jsonl");
  ASSERT_EQ(h.windows.size(), 2u);
  const metrics::WindowRecord& w = h.windows[0];
  EXPECT_EQ(w.step, 3);
  EXPECT_EQ(w.total_steps, 10);
  EXPECT_EQ(w.epoch, 1);
  EXPECT_EQ(w.loss, 2.25);
  EXPECT_EQ(w.lr, 1e-3);
  EXPECT_EQ(w.grad_norm, 0.5);
  EXPECT_TRUE(w.clipped);
  EXPECT_EQ(w.samples, 64);
  EXPECT_EQ(w.tokens, 4096);
  EXPECT_EQ(w.micro_batches, 8);
  EXPECT_EQ(w.peak_bytes, 123456789);
  EXPECT_EQ(w.micro_batch, 8);
  EXPECT_EQ(w.step_seconds, 0.25);
  EXPECT_EQ(w.elapsed_seconds, 1.5);
  EXPECT_EQ(w.samples_per_second, 256);
  EXPECT_EQ(w.tokens_per_second, 16384);
  EXPECT_FALSE(w.skipped);
  EXPECT_EQ(w.skipped_steps, 1);
  EXPECT_EQ(w.loss_scale, 1024);
  EXPECT_TRUE(std::isnan(h.windows[1].loss));  // written as null
  EXPECT_TRUE(h.windows[1].skipped);
  EXPECT_EQ(h.windows[1].skip_reason, "nonfinite_loss");
  ASSERT_EQ(h.evals.size(), 2u);
  EXPECT_EQ(h.evals[0].step, 3);
  EXPECT_EQ(h.evals[0].loss, 1.75);
  EXPECT_EQ(h.evals[0].tokens, 2048);
  EXPECT_FALSE(h.evals[0].accuracy.has_value());
  EXPECT_EQ(h.evals[1].accuracy, 0.75);
  EXPECT_EQ(h.notices, std::vector<std::string>{"micro-batch halved"});
}

TEST(JsonlReader, IgnoresAnUnfinishedLastLineAndNamesABadOne) {
  const std::string good = "{\"type\":\"window\",\"step\":1,\"loss\":2.0}\n";
  const metrics::MetricsHistory h =
      metrics::parse_metrics_jsonl(good + "{\"type\":\"win", "run/metrics.jsonl");
  ASSERT_EQ(h.windows.size(), 1u);
  EXPECT_EQ(h.windows[0].loss, 2.0);
  EXPECT_EQ(h.windows[0].samples, 0);  // a missing count
  const std::string error = testing::input_error_of(
      [&] { metrics::parse_metrics_jsonl(good + "\nnot json\n" + good, "run/metrics.jsonl"); });
  EXPECT_EQ(error,
            "run/metrics.jsonl line 3 is not a JSON object: not a bigbatch metrics file, or "
            "damaged");
}

}  // namespace
}  // namespace bigbatch
