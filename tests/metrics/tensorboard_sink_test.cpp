// TensorBoardSink: which scalars land at which step, decoded with protoc.
#include "bigbatch/metrics/tensorboard_sink.h"

#include <gtest/gtest.h>

#include "metrics/tfevents_decoder.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

metrics::WindowRecord window(int64_t step) {
  metrics::WindowRecord r;
  r.step = step;
  r.loss = 2.0 / static_cast<double>(step);
  r.lr = 1e-3;
  r.grad_norm = 0.75;
  r.samples_per_second = 100;
  r.tokens_per_second = 6400;
  r.peak_bytes = 3 * 1024 * 1024;
  return r;
}

TEST(TensorBoardSink, WritesWindowAndEvaluationScalarsAtTheirSteps) {
  const testing::TempDir dir;
  std::string path;
  {
    metrics::TensorBoardOptions options;
    options.directory = dir.path().string();
    metrics::TensorBoardSink sink(options);
    path = sink.path();
    sink.on_eval({0, 5.5, 32, 2048, 0.1, std::nullopt});
    sink.on_window(window(1));
    metrics::WindowRecord skipped = window(2);
    skipped.skipped = true;
    skipped.skipped_steps = 1;
    skipped.loss_scale = 32768;
    sink.on_window(skipped);
    sink.on_window(window(2));
    sink.on_eval({2, 1.25, 32, 2048, 0.1, 0.625});
  }
  const std::vector<testing::DecodedEvent> events = testing::decode_tfevents(path);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");

  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(events[1].scalars, (std::map<std::string, float>{{"val/loss", 5.5f}}));

  EXPECT_EQ(events[2].step, 1) << events[2].text;
  EXPECT_EQ(events[2].scalars, (std::map<std::string, float>{
                                   {"train/loss", 2.0f},
                                   {"train/lr", 1e-3f},
                                   {"train/grad_norm", 0.75f},
                                   {"train/skipped_steps", 0.0f},
                                   {"throughput/samples_per_second", 100.0f},
                                   {"throughput/tokens_per_second", 6400.0f},
                                   {"memory/peak_mib", 3.0f},
                               }));
  EXPECT_EQ(events[3].step, 2);  // the skipped window: its count and the scale only
  EXPECT_EQ(events[3].scalars, (std::map<std::string, float>{{"train/skipped_steps", 1.0f},
                                                             {"train/loss_scale", 32768.0f}}));
  EXPECT_EQ(events[4].step, 2);
  EXPECT_EQ(events[4].scalars.at("train/loss"), 1.0f);
  EXPECT_EQ(events[5].step, 2);
  EXPECT_EQ(events[5].scalars,
            (std::map<std::string, float>{{"val/loss", 1.25f}, {"val/accuracy", 0.625f}}));
  for (const testing::DecodedEvent& event : events) {
    EXPECT_TRUE(event.has_wall_time);
    EXPECT_NEAR(event.wall_time, metrics::wall_time_now(), 60.0);
  }
}

TEST(TensorBoardSink, SampleLossesLeaveOutTokensAndAResumedRunStartsANewFileWithASessionStart) {
  const testing::TempDir dir;
  metrics::TensorBoardOptions options;
  options.directory = dir.path().string();
  { metrics::TensorBoardSink first(options); }
  options.count_tokens = false;
  options.resumed_after_step = 40;
  std::string path;
  {
    metrics::TensorBoardSink resumed(options);
    path = resumed.path();
    resumed.on_window(window(41));
  }
  ASSERT_EQ(testing::event_files(dir.path()).size(), 2u);
  const std::vector<testing::DecodedEvent> events = testing::decode_tfevents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].session_status, 1) << events[1].text;  // START: later steps are replaced
  EXPECT_EQ(events[1].step, 41);
  EXPECT_EQ(events[2].step, 41);
  EXPECT_EQ(events[2].scalars.count("throughput/tokens_per_second"), 0u);
  EXPECT_EQ(events[2].scalars.count("throughput/samples_per_second"), 1u);
}

}  // namespace
}  // namespace bigbatch
