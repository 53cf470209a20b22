#include "bigbatch/core/device.h"

#include <torch/cuda.h>

#include <cstdlib>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"

#ifdef BIGBATCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace bigbatch {

namespace {

/// Where CUDA_VISIBLE_DEVICES hides GPUs, the clause that says so.
std::string visible_devices_clause() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible == nullptr ? "" : cat(" (CUDA_VISIBLE_DEVICES=\"", visible, "\")");
}

/// The index of "cuda:N", or -1 when `suffix` (what follows "cuda:") is not a number.
int parse_index(const std::string& suffix) {
  if (suffix.empty() || suffix.size() > 4 ||
      suffix.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(suffix);
}

/// "13.2" of CUDA's 13020; "" for 0 (unknown).
[[maybe_unused]] std::string version_of(int packed) {
  return packed <= 0 ? "" : cat(packed / 1000, ".", packed % 1000 / 10);
}

}  // namespace

CudaAvailability cuda_availability() {
  CudaAvailability cuda;
#ifdef BIGBATCH_WITH_CUDA
  cuda.built_with_cuda = true;
  cuda.device_count = static_cast<int>(torch::cuda::device_count());
#endif
  return cuda;
}

c10::Device parse_device(const std::string& text, const CudaAvailability& cuda,
                         const std::string& field) {
  if (text == "cpu")
    return c10::Device(c10::kCPU);
  if (text == "auto") {
    return cuda.built_with_cuda && cuda.device_count > 0 ? c10::Device(c10::kCUDA, 0)
                                                         : c10::Device(c10::kCPU);
  }
  const bool names_cuda = text == "cuda" || text.rfind("cuda:", 0) == 0;
  const int index = text == "cuda" ? 0 : names_cuda ? parse_index(text.substr(5)) : -1;
  BB_CHECK_INPUT(names_cuda && index >= 0, field, " = \"", text,
                 "\" is not a device; expected \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"");
  BB_CHECK_INPUT(cuda.built_with_cuda, field, " = \"", text,
                 "\": this LibTorch has no CUDA (a CPU-only build); build bigbatch against a "
                 "LibTorch with CUDA, such as the PyTorch wheel's (scripts/setup), or use "
                 "\"cpu\"");
  BB_CHECK_INPUT(cuda.device_count > 0, field, " = \"", text,
                 "\": no GPU is visible to this process", visible_devices_clause(),
                 "; `bigbatch doctor` says why, or use \"cpu\"");
  BB_CHECK_INPUT(index < cuda.device_count, field, " = \"", text,
                 "\": the index is out of range: ", cuda.device_count,
                 cuda.device_count == 1 ? " GPU is" : " GPUs are", " visible (cuda:0",
                 cuda.device_count > 1 ? cat(" to cuda:", cuda.device_count - 1) : "", ")",
                 visible_devices_clause());
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

c10::Device rank_device(c10::Device chosen, int64_t local_rank, const CudaAvailability& cuda) {
  if (!chosen.is_cuda())
    return chosen;
  BB_CHECK_INPUT(local_rank < cuda.device_count, "rank with LOCAL_RANK=", local_rank,
                 " has no GPU of its own: ", cuda.device_count,
                 cuda.device_count == 1 ? " GPU is" : " GPUs are", " visible on this machine",
                 visible_devices_clause(), "; start at most that many ranks per machine");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

void make_current(c10::Device device) {
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda())
    c10::cuda::set_device(device.index());
#endif
  (void)device;
}

GpuProperties gpu_properties(int index) {
  const CudaAvailability cuda = cuda_availability();
  BB_CHECK_INPUT(cuda.built_with_cuda, "GPU ", index, ": this LibTorch has no CUDA");
  BB_CHECK_INPUT(index >= 0 && index < cuda.device_count, "GPU ", index,
                 " is out of range: ", cuda.device_count, " visible");
  GpuProperties gpu;
#ifdef BIGBATCH_WITH_CUDA
  const cudaDeviceProp* properties = at::cuda::getDeviceProperties(index);
  gpu.name = properties->name;
  gpu.memory_bytes = static_cast<int64_t>(properties->totalGlobalMem);
  gpu.major = properties->major;
  gpu.minor = properties->minor;
  gpu.bf16 = gpu.major >= 8;
  gpu.fp16 = gpu.major > 5 || (gpu.major == 5 && gpu.minor >= 3);
#endif
  return gpu;
}

#ifdef BIGBATCH_WITH_CUDA
namespace {

/// The version a CUDA query (cudaRuntimeGetVersion, cudaDriverGetVersion) answers, "" on error.
std::string queried_version(cudaError_t (*query)(int*)) {
  int version = 0;
  return query(&version) == cudaSuccess ? version_of(version) : "";
}

}  // namespace
#endif

std::string cuda_runtime_version() {
#ifdef BIGBATCH_WITH_CUDA
  return queried_version(&cudaRuntimeGetVersion);
#else
  return "";
#endif
}

std::string cuda_driver_version() {
#ifdef BIGBATCH_WITH_CUDA
  return queried_version(&cudaDriverGetVersion);
#else
  return "";
#endif
}

std::string describe_device(c10::Device device) {
  if (!device.is_cuda())
    return device.str();
  const GpuProperties gpu = gpu_properties(device.index());
  return cat(device.str(), " (", gpu.name, ", ", format_bytes(gpu.memory_bytes),
             ", compute capability ", gpu.major, ".", gpu.minor, ")");
}

c10::Device device_of(const torch::nn::Module& module) {
  for (const torch::Tensor& p : module.parameters())
    return p.device();
  for (const torch::Tensor& b : module.buffers())
    return b.device();
  return c10::Device(c10::kCPU);
}

int64_t device_memory_bytes(c10::Device device) {
  return device.is_cuda() ? gpu_properties(device.index()).memory_bytes : 0;
}

}  // namespace bigbatch
