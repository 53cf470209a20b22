// Tensor memory of the device a run trains on, through one interface: the CPU's counting
// allocator (MemoryTracker) or the CUDA caching allocator of a GPU.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace bigbatch::memory {

/// Sets the peak of `device`'s tensor memory to its current use: MemoryTracker::reset_peak() on
/// the CPU, the caching allocator's peak statistics on a CUDA device.
void reset_peak_bytes(c10::Device device);

/// The most tensor memory in use on `device` since the last reset_peak_bytes(): the tracker's
/// (0 when it is not installed) or the caching allocator's allocated bytes. Memory the allocator
/// caches but no tensor holds is not counted.
int64_t peak_bytes(c10::Device device);

/// Tensor memory in use on `device` now (0 on the CPU without the tracker).
int64_t current_bytes(c10::Device device);

/// Limits the tensor memory of `device` to `bytes` (0: unlimited), so that an allocation over it
/// throws c10::OutOfMemoryError: MemoryTracker::set_budget on the CPU; on a CUDA device the
/// caching allocator's per-process memory fraction, bytes / the device's memory (which also
/// counts the allocator's cached blocks, so it frees them before it refuses). Throws InputError
/// for a budget above a GPU's memory.
void set_budget_bytes(c10::Device device, int64_t bytes);

/// The budget set_budget_bytes set on `device`, 0 when unlimited.
int64_t budget_bytes(c10::Device device);

/// After an out-of-memory error: hands the caching allocator's unused blocks back to the driver
/// (CUDA), so that a retry at a smaller micro-batch starts from a clean pool. Nothing on the CPU.
void release_cached_memory(c10::Device device);

}  // namespace bigbatch::memory
