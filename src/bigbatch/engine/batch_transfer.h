// Micro-batches from the host to the training device: on a GPU, asynchronous copies on a stream
// of their own, ordered before the compute that reads them by events, not by synchronisation.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "bigbatch/data/dataset.h"

namespace bigbatch::engine {

/// Moves batches gathered on the host to `device`. On the CPU it hands them on as they are. On a
/// GPU each batch (from pinned memory: data::Prefetcher::pin_batches) is copied on a side stream
/// without blocking the host; an event recorded after the copy makes the compute stream (the
/// current one when to_device is called) wait for it on the GPU, and the copy's memory is marked
/// as used by the compute stream so the caching allocator does not hand it out again before
/// that stream is done with it. So a window's copies, all issued before its first forward, run
/// beside the compute of the micro-batches before them, and no stream ever reads a batch before
/// its copy has finished. Nothing else crosses the streams: gradients live on the compute stream
/// alone (docs/GPU.md says why the seed article's two-stream example races and this does not).
class BatchTransfer {
 public:
  explicit BatchTransfer(c10::Device device);
  ~BatchTransfer();
  BatchTransfer(const BatchTransfer&) = delete;
  BatchTransfer& operator=(const BatchTransfer&) = delete;

  /// `batch` on the device, usable on the current stream at once (see above).
  data::Batch to_device(const data::Batch& batch);
  /// The device batches go to.
  c10::Device device() const { return device_; }

 private:
  struct CudaState;  // the copy stream; defined in CUDA builds
  c10::Device device_;
  std::unique_ptr<CudaState> cuda_;
};

}  // namespace bigbatch::engine
