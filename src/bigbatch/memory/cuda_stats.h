// GPU memory figures from LibTorch's CUDA caching allocator (builds with CUDA only).
#pragma once

#include <cstdint>
#include <optional>

namespace bigbatch::memory {

/// Bytes held by LibTorch's CUDA caching allocator on one device.
struct CudaMemoryStats {
  /// Bytes of live tensors now.
  int64_t allocated = 0;
  /// The highest `allocated` since start (or since the allocator's peak was reset).
  int64_t peak_allocated = 0;
  /// Bytes reserved from the driver, cached free blocks included.
  int64_t reserved = 0;
};

/// The caching allocator's figures for CUDA device `device`; nullopt when bigbatch was built
/// without CUDA (BIGBATCH_WITH_CUDA undefined), when no GPU is present, or when `device` is not
/// one of them.
std::optional<CudaMemoryStats> cuda_memory_stats(int device);

}  // namespace bigbatch::memory
