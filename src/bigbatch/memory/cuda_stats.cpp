#include "bigbatch/memory/cuda_stats.h"

#ifdef BIGBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace bigbatch::memory {

std::optional<CudaMemoryStats> cuda_memory_stats(int device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device < 0 || device >= static_cast<int>(c10::cuda::device_count()))
    return std::nullopt;
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  // Index 0 is StatType::AGGREGATE (all pools) in every LibTorch 2.x; the enum's namespace moved
  // between versions, its value did not.
  constexpr size_t kAggregate = 0;
  CudaMemoryStats result;
  result.allocated = stats.allocated_bytes[kAggregate].current;
  result.peak_allocated = stats.allocated_bytes[kAggregate].peak;
  result.reserved = stats.reserved_bytes[kAggregate].current;
  return result;
#else
  (void)device;
  return std::nullopt;
#endif
}

}  // namespace bigbatch::memory
