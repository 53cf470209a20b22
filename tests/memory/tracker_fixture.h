// A fixture for tests of the process-wide MemoryTracker.
#pragma once

#include <gtest/gtest.h>

#include "bigbatch/memory/tracker.h"

namespace bigbatch::testing {

/// Installs the tracker, reads the usage before the test as `baseline_`, and leaves the tracker
/// without a budget, in the setup phase, and (checked) back at the baseline afterwards. Tests of
/// one executable share the tracker: compare against `baseline_`, never against 0.
class TrackerTest : public ::testing::Test {
 protected:
  static memory::MemoryTracker& tracker() { return memory::MemoryTracker::instance(); }

  void SetUp() override {
    tracker().install();
    tracker().set_budget(0);
    tracker().set_phase(memory::Phase::kSetup);
    baseline_ = tracker().current_bytes();
  }

  void TearDown() override {
    tracker().set_budget(0);
    tracker().set_phase(memory::Phase::kSetup);
    EXPECT_EQ(tracker().current_bytes(), baseline_) << "the test left tensors alive";
  }

  int64_t baseline_ = 0;
};

}  // namespace bigbatch::testing
