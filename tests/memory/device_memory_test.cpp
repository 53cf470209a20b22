// Device memory on the CPU: the counting allocator behind the device-neutral calls. Their CUDA
// side is tested in tests/gpu/ on a machine with a GPU.
#include "bigbatch/memory/device_memory.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include "bigbatch/memory/tracker.h"

namespace bigbatch::memory {
namespace {

const c10::Device kCpu(c10::kCPU);

TEST(DeviceMemory, TheCpuIsTheCountingAllocator) {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.install();
  reset_peak_bytes(kCpu);
  const int64_t before = current_bytes(kCpu);
  EXPECT_EQ(before, tracker.current_bytes());
  {
    const torch::Tensor x = torch::empty({1 << 18}, torch::kFloat);  // 1 MiB
    EXPECT_EQ(current_bytes(kCpu), before + (1 << 20));
  }
  EXPECT_EQ(current_bytes(kCpu), before);
  EXPECT_EQ(peak_bytes(kCpu), before + (1 << 20));
  reset_peak_bytes(kCpu);
  EXPECT_EQ(peak_bytes(kCpu), before);
}

TEST(DeviceMemory, ACpuBudgetRefusesWhatExceedsIt) {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.install();
  set_budget_bytes(kCpu, current_bytes(kCpu) + (1 << 20));
  EXPECT_EQ(tracker.budget(), current_bytes(kCpu) + (1 << 20));
  EXPECT_THROW(torch::empty({1 << 19}, torch::kFloat), c10::OutOfMemoryError);  // 2 MiB
  set_budget_bytes(kCpu, 0);
  EXPECT_EQ(tracker.budget(), 0);
  release_cached_memory(kCpu);  // nothing to release on the CPU
}

}  // namespace
}  // namespace bigbatch::memory
