#include "bigbatch/memory/tracker.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "memory/tracker_fixture.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using memory::MemoryTracker;
using memory::Phase;
using testing::TrackerTest;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

torch::Tensor bytes_tensor(int64_t n) {
  return torch::empty({n}, torch::kUInt8);
}

TEST_F(TrackerTest, InstallIsIdempotentAndReplacesTheCpuAllocator) {
  EXPECT_TRUE(tracker().installed());
  c10::Allocator* allocator = c10::GetCPUAllocator();
  tracker().install();
  EXPECT_EQ(c10::GetCPUAllocator(), allocator);
  EXPECT_NE(c10::GetCPUAllocator(), c10::GetDefaultCPUAllocator());
}

TEST_F(TrackerTest, CountsExactTensorBytesAndReturnsToTheBaseline) {
  const int64_t allocations = tracker().allocations();
  {
    torch::Tensor bytes = bytes_tensor(1000);
    EXPECT_EQ(tracker().current_bytes(), baseline_ + 1000);
    torch::Tensor floats = torch::empty({1000}, torch::kFloat);
    EXPECT_EQ(tracker().current_bytes(), baseline_ + 1000 + 4000);
    torch::Tensor doubles = torch::zeros({3, 7}, torch::kDouble);
    EXPECT_EQ(tracker().current_bytes(), baseline_ + 1000 + 4000 + 168);
    EXPECT_EQ(tracker().allocations(), allocations + 3);
    bytes.reset();
    EXPECT_EQ(tracker().current_bytes(), baseline_ + 4000 + 168);
  }
  EXPECT_EQ(tracker().current_bytes(), baseline_);
}

TEST_F(TrackerTest, ViewsAndEmptyTensorsAllocateNothing) {
  const int64_t allocations = tracker().allocations();
  torch::Tensor empty = torch::empty({0}, torch::kFloat);
  torch::Tensor base = torch::empty({16, 16}, torch::kFloat);
  torch::Tensor view = base.t().narrow(0, 2, 4);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 1024);
  EXPECT_EQ(tracker().allocations(), allocations + 1);
}

TEST_F(TrackerTest, PeakTracksTheMaximum) {
  tracker().reset_peak();
  EXPECT_EQ(tracker().peak_bytes(), baseline_);
  {
    torch::Tensor big = bytes_tensor(kMiB);
    EXPECT_EQ(tracker().peak_bytes(), baseline_ + kMiB);
  }
  torch::Tensor small = bytes_tensor(512 * kKiB);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 512 * kKiB);
  EXPECT_EQ(tracker().peak_bytes(), baseline_ + kMiB);
  tracker().reset_peak();
  EXPECT_EQ(tracker().peak_bytes(), baseline_ + 512 * kKiB);
}

TEST_F(TrackerTest, MeasurePeakCountsAboveTheStartAndKeepsTheOuterPeak) {
  tracker().reset_peak();
  { torch::Tensor earlier = bytes_tensor(3 * kMiB); }
  torch::Tensor held = bytes_tensor(100);
  const int64_t peak = memory::measure_peak([] {
    torch::Tensor a = bytes_tensor(kMiB);
    torch::Tensor b = bytes_tensor(kMiB);
    a.reset();
    torch::Tensor c = bytes_tensor(512 * kKiB);
  });
  EXPECT_EQ(peak, 2 * kMiB);
  EXPECT_EQ(tracker().peak_bytes(), baseline_ + 3 * kMiB);  // the outer peak survives

  memory::PeakScope outer;
  EXPECT_EQ(outer.start_bytes(), baseline_ + 100);
  const int64_t inner = memory::measure_peak([] { bytes_tensor(64 * kKiB); });
  EXPECT_EQ(inner, 64 * kKiB);
  EXPECT_EQ(outer.peak_above_start(), 64 * kKiB);
  EXPECT_THROW(memory::measure_peak([] { throw std::runtime_error("boom"); }), std::runtime_error);
}

TEST_F(TrackerTest, BudgetRefusesAnAllocationAboveItAndRecovers) {
  tracker().set_budget(baseline_ + kMiB);
  EXPECT_EQ(tracker().budget(), baseline_ + kMiB);
  const int64_t ooms = tracker().oom_count();
  torch::Tensor allowed = bytes_tensor(512 * kKiB);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 512 * kKiB);
  std::string message;
  try {
    bytes_tensor(2 * kMiB);
    ADD_FAILURE() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("CPU out of memory under the memory budget: tried to allocate 2.00 MiB "
                         "with " +
                         format_bytes(baseline_ + 512 * kKiB) + " of " +
                         format_bytes(baseline_ + kMiB) + " in use"),
            std::string::npos)
      << message;
  EXPECT_EQ(tracker().oom_count(), ooms + 1);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 512 * kKiB);
  torch::Tensor smaller = bytes_tensor(256 * kKiB);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 768 * kKiB);
  EXPECT_NO_THROW(bytes_tensor(256 * kKiB));  // exactly up to the budget is allowed
  EXPECT_THROW(bytes_tensor(256 * kKiB + 1), c10::OutOfMemoryError);
  allowed.reset();
  smaller.reset();
  EXPECT_EQ(tracker().current_bytes(), baseline_);
  tracker().set_budget(0);
  EXPECT_NO_THROW(bytes_tensor(4 * kMiB));
}

TEST_F(TrackerTest, NegativeBudgetIsAnInputError) {
  const std::string message = testing::input_error_of([] { tracker().set_budget(-1); });
  EXPECT_NE(message.find("memory budget = -1"), std::string::npos) << message;
  EXPECT_EQ(tracker().budget(), 0);
}

TEST_F(TrackerTest, OutOfMemoryInBackwardSurvivesAutogradAndMemoryRecovers) {
  torch::manual_seed(0);
  torch::nn::Linear model(256, 256);
  const torch::Tensor x = torch::randn({64, 256});  // (B, C)
  const int64_t start = tracker().current_bytes();
  // Forward needs 128 KiB (output and its square); backward needs 256 KiB for the weight gradient.
  tracker().set_budget(start + 200 * kKiB);
  const int64_t ooms = tracker().oom_count();
  bool forward_done = false;
  bool thrown = false;
  try {
    torch::Tensor loss = model->forward(x).square().mean();
    forward_done = true;
    loss.backward();
  } catch (const c10::OutOfMemoryError& error) {
    thrown = true;
    EXPECT_NE(std::string(error.what()).find("memory budget"), std::string::npos);
  }
  EXPECT_TRUE(forward_done);
  EXPECT_TRUE(thrown);
  EXPECT_EQ(tracker().oom_count(), ooms + 1);
  for (torch::Tensor& parameter : model->parameters())
    parameter.mutable_grad().reset();
  EXPECT_EQ(tracker().current_bytes(), start);
  tracker().set_budget(0);
  model->forward(x).square().mean().backward();
  EXPECT_EQ(model->weight.grad().numel(), 256 * 256);
}

TEST_F(TrackerTest, OutOfMemoryInForwardLeavesNothingBehind) {
  torch::nn::Linear model(128, 128);
  const torch::Tensor x = torch::randn({512, 128});
  const int64_t start = tracker().current_bytes();
  tracker().set_budget(start + 16 * kKiB);
  EXPECT_THROW(model->forward(x).sum().backward(), c10::OutOfMemoryError);
  EXPECT_EQ(tracker().current_bytes(), start);
}

TEST_F(TrackerTest, PhasePeaksAreRecordedPerPhase) {
  tracker().reset_phase_peaks();
  EXPECT_EQ(tracker().peak_bytes(Phase::kSetup), baseline_);
  EXPECT_EQ(tracker().peak_bytes(Phase::kForward), 0);
  {
    memory::ScopedPhase phase(Phase::kForward);
    EXPECT_EQ(tracker().phase(), Phase::kForward);
    torch::Tensor activations = bytes_tensor(kMiB);
  }
  EXPECT_EQ(tracker().phase(), Phase::kSetup);
  {
    memory::ScopedPhase phase(Phase::kBackward);
    torch::Tensor grads = bytes_tensor(256 * kKiB);
    {
      memory::ScopedPhase nested(Phase::kOptimizer);
      torch::Tensor state = bytes_tensor(64 * kKiB);
    }
    EXPECT_EQ(tracker().phase(), Phase::kBackward);
  }
  EXPECT_EQ(tracker().phase(), Phase::kSetup);
  EXPECT_EQ(tracker().peak_bytes(Phase::kSetup), baseline_);
  EXPECT_EQ(tracker().peak_bytes(Phase::kForward), baseline_ + kMiB);
  EXPECT_EQ(tracker().peak_bytes(Phase::kBackward), baseline_ + 256 * kKiB);
  EXPECT_EQ(tracker().peak_bytes(Phase::kOptimizer), baseline_ + 320 * kKiB);
  EXPECT_EQ(tracker().peak_bytes(Phase::kEval), 0);
  EXPECT_STREQ(memory::phase_name(Phase::kOptimizer), "optimizer");
  tracker().reset_phase_peaks();
  EXPECT_EQ(tracker().peak_bytes(Phase::kForward), 0);
}

TEST_F(TrackerTest, RawAllocateAndDeallocateAreCountedAndAligned) {
  const int64_t allocations = tracker().allocations();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  ASSERT_NE(allocator->raw_deleter(), nullptr);
  void* data = allocator->raw_allocate(100);
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
  EXPECT_EQ(tracker().current_bytes(), baseline_ + 100);
  EXPECT_EQ(tracker().allocations(), allocations + 1);
  allocator->raw_deallocate(data);
  EXPECT_EQ(tracker().current_bytes(), baseline_);
}

TEST_F(TrackerTest, CountsStayExactAcrossThreads) {
  tracker().reset_peak();
  const int64_t allocations = tracker().allocations();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 500; ++i)
        bytes_tensor(1000 + i);
    });
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(tracker().current_bytes(), baseline_);
  EXPECT_EQ(tracker().allocations(), allocations + 2000);
  EXPECT_GE(tracker().peak_bytes(), baseline_ + 1000);
  EXPECT_LE(tracker().peak_bytes(), baseline_ + 4 * 1499);
}

}  // namespace
}  // namespace bigbatch
