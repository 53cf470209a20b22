#include "bigbatch/engine/batch_transfer.h"

#ifdef BIGBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace bigbatch::engine {

#ifdef BIGBATCH_WITH_CUDA
struct BatchTransfer::CudaState {
  c10::cuda::CUDAStream copies;
};

namespace {

/// `host` copied to the device on `copies`, then waited for by `compute`.
torch::Tensor copied(const torch::Tensor& host, c10::Device device, c10::cuda::CUDAStream copies,
                     c10::cuda::CUDAStream compute) {
  if (!host.defined() || host.device() == device)
    return host;
  torch::Tensor on_device;
  {
    const c10::cuda::CUDAStreamGuard on_copies(copies);
    // From pinned memory the copy is asynchronous; the host allocator keeps the pinned block
    // until the copy's own event has passed.
    on_device = host.to(device, /*non_blocking=*/host.is_pinned());
  }
  at::cuda::CUDAEvent done;
  done.record(copies);
  done.block(compute);
  // Allocated on `copies`, read and freed on `compute`: the allocator must wait for `compute`.
  c10::cuda::CUDACachingAllocator::recordStream(on_device.storage().data_ptr(), compute);
  return on_device;
}

}  // namespace
#else
struct BatchTransfer::CudaState {};
#endif

BatchTransfer::BatchTransfer(c10::Device device) : device_(device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device_.is_cuda())
    cuda_ = std::make_unique<CudaState>(
        CudaState{c10::cuda::getStreamFromPool(false, device_.index())});
#endif
}

BatchTransfer::~BatchTransfer() = default;

data::Batch BatchTransfer::to_device(const data::Batch& batch) {
#ifdef BIGBATCH_WITH_CUDA
  if (cuda_) {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    return {copied(batch.inputs, device_, cuda_->copies, compute),
            copied(batch.targets, device_, cuda_->copies, compute)};
  }
#endif
  return data::to_device(batch, device_);
}

}  // namespace bigbatch::engine
