// Where a run's tensors live and compute: the CPU or one CUDA GPU, as the user's device setting
// names it, checked against what this LibTorch and this machine have.
#pragma once

#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <string>

namespace bigbatch {

/// The device setting's default: a GPU where this build and machine have one, else the CPU.
inline constexpr const char* kDefaultDevice = "auto";

/// What decides whether a CUDA device can be used.
struct CudaAvailability {
  bool built_with_cuda = false;  ///< this LibTorch, and so bigbatch, has CUDA compiled in
  int device_count = 0;          ///< GPUs it sees (after CUDA_VISIBLE_DEVICES)
};

/// This build's and this machine's.
CudaAvailability cuda_availability();

/// The device `text` names: "cpu"; "cuda" (= "cuda:0") or "cuda:N"; "auto": cuda:0 when the
/// build has CUDA and sees a GPU, else the CPU. Throws InputError starting with `field` for any
/// other text, and for a CUDA device that cannot be used, saying why: this LibTorch has no CUDA,
/// no GPU is visible, or the index is out of range (naming the devices there are).
c10::Device parse_device(const std::string& text, const CudaAvailability& cuda,
                         const std::string& field);

/// The device of the rank with `local_rank` on its machine, for a job told to train on `chosen`:
/// the CPU stays the CPU; a GPU becomes cuda:local_rank, one GPU per rank as torchrun lays them
/// out. Throws InputError when the machine has fewer GPUs than ranks.
c10::Device rank_device(c10::Device chosen, int64_t local_rank, const CudaAvailability& cuda);

/// Makes `device` the current CUDA device of this thread (cudaSetDevice), so that LibTorch's and
/// NCCL's streams and allocations land on it; nothing for the CPU.
void make_current(c10::Device device);

/// What `bigbatch doctor` reports of one GPU.
struct GpuProperties {
  std::string name;          ///< "NVIDIA H200"
  int64_t memory_bytes = 0;  ///< its global memory
  int major = 0, minor = 0;  ///< compute capability
  /// bf16 kernels run natively (compute capability 8.0 and later, as torch.cuda.is_bf16_supported
  /// decides); fp16 from 5.3 on (tensor cores from 7.0).
  bool bf16 = false, fp16 = false;
};

/// The properties of CUDA device `index` (in [0, cuda_availability().device_count)); throws
/// InputError in a build without CUDA or for an index out of range.
GpuProperties gpu_properties(int index);

/// The CUDA runtime's version ("13.2") and the newest the driver supports ("13.0"); "" in a build
/// without CUDA (and the driver's "" when no driver is loaded).
std::string cuda_runtime_version();
std::string cuda_driver_version();

/// For the plan table and logs: "cpu", or "cuda:0 (NVIDIA H200, 139.7 GiB, compute capability
/// 9.0)".
std::string describe_device(c10::Device device);

/// Where `module` computes: the device of its first parameter (or buffer); the CPU for a module
/// with neither.
c10::Device device_of(const torch::nn::Module& module);

/// Bytes of memory of a CUDA device; 0 for the CPU (its limit is memory.budget).
int64_t device_memory_bytes(c10::Device device);

}  // namespace bigbatch
