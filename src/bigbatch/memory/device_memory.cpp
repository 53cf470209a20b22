#include "bigbatch/memory/device_memory.h"

#include <cmath>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/memory/tracker.h"

#ifdef BIGBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace bigbatch::memory {

namespace {

#ifdef BIGBATCH_WITH_CUDA
/// Index 0 of the allocator's per-pool statistics is StatType::AGGREGATE (all pools) in every
/// LibTorch 2.x; the enum's namespace moved between versions, its value did not.
constexpr size_t kAggregate = 0;

c10::CachingDeviceAllocator::DeviceStats cuda_stats(c10::Device device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
}
#endif

}  // namespace

void reset_peak_bytes(c10::Device device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  (void)device;
  MemoryTracker::instance().reset_peak();
}

int64_t peak_bytes(c10::Device device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda())
    return cuda_stats(device).allocated_bytes[kAggregate].peak;
#endif
  (void)device;
  const MemoryTracker& tracker = MemoryTracker::instance();
  return tracker.installed() ? tracker.peak_bytes() : 0;
}

int64_t current_bytes(c10::Device device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda())
    return cuda_stats(device).allocated_bytes[kAggregate].current;
#endif
  (void)device;
  const MemoryTracker& tracker = MemoryTracker::instance();
  return tracker.installed() ? tracker.current_bytes() : 0;
}

void set_budget_bytes(c10::Device device, int64_t bytes) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda()) {
    BB_CHECK_INPUT(bytes >= 0, "memory budget must be >= 0 bytes, got ", bytes);
    const int64_t total = device_memory_bytes(device);
    BB_CHECK_INPUT(bytes <= total, "memory budget ", format_bytes(bytes), " is more than the ",
                   format_bytes(total), " of ", describe_device(device));
    const double fraction =
        bytes == 0 ? 1.0 : static_cast<double>(bytes) / static_cast<double>(total);
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
    return;
  }
#endif
  (void)device;
  MemoryTracker::instance().set_budget(bytes);
}

int64_t budget_bytes(c10::Device device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda()) {
    const double fraction = c10::cuda::CUDACachingAllocator::getMemoryFraction(device.index());
    return fraction >= 1.0
               ? 0
               : std::llround(fraction * static_cast<double>(device_memory_bytes(device)));
  }
#endif
  (void)device;
  return MemoryTracker::instance().budget();
}

void release_cached_memory(c10::Device device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)device;
}

}  // namespace bigbatch::memory
