#include "bigbatch/cli/doctor_checks.h"

#include <ATen/Context.h>
#include <sys/statvfs.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/libtorch_origin.h"
#include "bigbatch/core/matmul_speed.h"
#include "bigbatch/core/openblas_kernels.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/dist/process_group.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/nn/fp32_matmul.h"

namespace bigbatch::cli {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kLowMemory = 1024 * kMiB;
constexpr int64_t kLowDisk = 256 * kMiB;

/// The value of `name=` in show_config()'s "Build settings" line ("OFF", "ON", "open", ...).
std::string build_setting(const std::string& show_config, const std::string& name) {
  const size_t at = show_config.find(" " + name + "=");
  if (at == std::string::npos)
    return "";
  const size_t start = at + name.size() + 2;
  return show_config.substr(start, show_config.find_first_of(", \n", start) - start);
}

bool is_on(const std::string& setting) {
  return setting == "ON" || setting == "1" || setting == "TRUE" || setting == "on";
}

/// Whether an NVIDIA display or 3D controller (PCI vendor 0x10de, class 0x03xxxx) is present.
bool nvidia_gpu_on_pci() {
  std::error_code error;
  for (const auto& device : fs::directory_iterator("/sys/bus/pci/devices", error)) {
    const std::string vendor = io::read_file_or_empty((device.path() / "vendor").string());
    const std::string device_class = io::read_file_or_empty((device.path() / "class").string());
    if (vendor.rfind("0x10de", 0) == 0 && device_class.rfind("0x03", 0) == 0)
      return true;
  }
  return false;
}

std::string env_or(const char* name, const std::string& otherwise) {
  return environment_variable(name).value_or(otherwise);
}

/// "x86_64-linux-gnu" from "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3".
std::string multiarch_of(const std::string& blas_path) {
  return fs::path(blas_path).parent_path().parent_path().filename().string();
}

Finding problem(std::string topic, std::string value, std::string detail, std::string fix) {
  return {std::move(topic), std::move(value), std::move(detail), true, std::move(fix)};
}

/// The nearest of `path` and its ancestors that exists.
fs::path nearest_existing(fs::path path) {
  std::error_code error;
  path = fs::absolute(path, error).lexically_normal();
  while (!fs::exists(path, error) && path.has_relative_path())
    path = path.parent_path();
  return path;
}

/// Whether a file can be created in the directory: creates one and removes it.
bool can_create_file_in(const fs::path& directory) {
  std::string name = (directory / ".bigbatch-doctor-XXXXXX").string();
  const int fd = ::mkstemp(name.data());
  if (fd < 0)
    return false;
  ::close(fd);
  ::unlink(name.c_str());
  return true;
}

}  // namespace

std::string openblas_alternative(const BlasLibrary& blas) {
  if (blas.resolved.empty())
    return "";
  const fs::path candidate =
      fs::path(blas.resolved).parent_path().parent_path() / "openblas-pthread" / "libblas.so.3";
  std::error_code error;
  return fs::exists(candidate, error) ? candidate.string() : "";
}

Finding libtorch_finding(const std::string& show_config) {
  const bool cuda = is_on(build_setting(show_config, "USE_CUDA")) || at::hasCUDA();
  std::string parts = cuda ? "built with CUDA" : "CPU-only build (no CUDA)";
  parts +=
      cat("; OpenMP ", at::hasOpenMP() ? "yes" : "no", ", oneDNN ", at::hasMKLDNN() ? "yes" : "no",
          ", MKL ", at::hasMKL() ? "yes" : "no", ", LAPACK ", at::hasLAPACK() ? "yes" : "no");
  const std::string blas = build_setting(show_config, "BLAS_INFO");
  if (!blas.empty())
    parts += ", BLAS_INFO=" + blas;
  return {"libtorch", cat(TORCH_VERSION, " from ", libtorch_origin()), parts, false, ""};
}

CudaFacts cuda_facts(const std::string& show_config) {
  CudaFacts facts;
  facts.built_with_cuda = is_on(build_setting(show_config, "USE_CUDA")) || at::hasCUDA();
#ifdef BIGBATCH_WITH_CUDA
  facts.built_with_cuda = true;
#endif
  facts.device_count = at::hasCUDA() ? static_cast<int>(torch::cuda::device_count()) : 0;
  const std::string version = io::read_file_or_empty("/proc/driver/nvidia/version");
  facts.driver_loaded = !version.empty();
  facts.driver_version = version.substr(0, version.find('\n'));
  facts.nvidia_gpu_present = nvidia_gpu_on_pci();
  return facts;
}

Finding diagnose_cuda(const CudaFacts& f) {
  if (f.device_count > 0)
    return {"cuda", cat("available, ", f.device_count, " device(s)"), f.driver_version, false, ""};
  if (!f.built_with_cuda) {
    const std::string why = "not available: this LibTorch is a CPU-only build";
    if (!f.nvidia_gpu_present)
      return {"cuda", why, "no NVIDIA GPU on this machine either; training runs on the CPU", false,
              ""};
    return problem("cuda", why, "this machine has an NVIDIA GPU that bigbatch cannot use",
                   "build bigbatch against a LibTorch with CUDA, e.g. the one in a PyTorch 2.x "
                   "wheel: cmake -S . -B build -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; "
                   "print(torch.utils.cmake_prefix_path)')");
  }
  if (!f.driver_loaded) {
    if (!f.nvidia_gpu_present)
      return {"cuda", "not available: no NVIDIA GPU", "LibTorch has CUDA, the machine no GPU",
              false, ""};
    return problem("cuda", "not available: no NVIDIA driver",
                   "an NVIDIA GPU is on the PCI bus but its kernel driver is not loaded",
                   "install the NVIDIA driver (Debian: apt install nvidia-driver, from non-free) "
                   "and reboot; nvidia-smi should then list the GPU");
  }
  return problem("cuda", "not available: no device",
                 cat("the driver is loaded (", f.driver_version, ") but LibTorch sees no device",
                     std::getenv("CUDA_VISIBLE_DEVICES") != nullptr
                         ? cat("; CUDA_VISIBLE_DEVICES=", std::getenv("CUDA_VISIBLE_DEVICES"))
                         : std::string()),
                 "check nvidia-smi, CUDA_VISIBLE_DEVICES and that the CUDA runtime in LibTorch "
                 "is not newer than the driver supports");
}

GpuReport gpu_report() {
  GpuReport report;
  const CudaAvailability cuda = cuda_availability();
  report.built_with_cuda = cuda.built_with_cuda;
  for (int i = 0; i < cuda.device_count; ++i)
    report.gpus.push_back(gpu_properties(i));
  report.runtime_version = cuda_runtime_version();
  report.driver_version = cuda_driver_version();
  report.nccl_version = dist::nccl_version();
  return report;
}

std::vector<Finding> gpu_findings(const GpuReport& report) {
  std::vector<Finding> findings;
  if (!report.built_with_cuda)
    return findings;
  for (size_t i = 0; i < report.gpus.size(); ++i) {
    const GpuProperties& gpu = report.gpus[i];
    findings.push_back(
        {cat("gpu ", i), cat(gpu.name, ", ", format_bytes(gpu.memory_bytes)),
         cat("compute capability ", gpu.major, ".", gpu.minor, "; bf16 ",
             gpu.bf16 ? "yes" : "no (fp16 or fp32 instead)", ", fp16 ", gpu.fp16 ? "yes" : "no"),
         false, ""});
  }
  findings.push_back(
      {"cuda versions",
       cat("runtime ", report.runtime_version.empty() ? "unknown" : report.runtime_version,
           ", driver ", report.driver_version.empty() ? "none" : report.driver_version),
       report.driver_version.empty() ? "no NVIDIA driver: the CUDA runtime cannot start"
                                     : "the driver supports CUDA up to its version",
       false, ""});
  findings.push_back({"nccl",
                      report.nccl_version.empty() ? "not in this build" : report.nccl_version,
                      report.nccl_version.empty() ? "data parallel over Gloo only"
                                                  : "data parallel on GPUs (dist.backend = nccl)",
                      false, ""});
  return findings;
}

Finding threads_finding(const ThreadSettings& at_start, int cores) {
  const bool openblas = at_start.blas > 0;
  const ThreadSettings fp32 =
      choose_threads(ThreadRequest().backend(MatmulBackend::kBlas), cores, openblas);
  const ThreadSettings bf16 =
      choose_threads(ThreadRequest().backend(MatmulBackend::kOneDnn), cores, openblas);
  return {"threads",
          cat("OpenMP ", at_start.openmp, ", ",
              at_start.blas > 0 ? cat("OpenBLAS ", at_start.blas) : std::string("no OpenBLAS"),
              " on ", cores, " cores"),
          cat("as started (OMP_NUM_THREADS=", env_or("OMP_NUM_THREADS", "unset"),
              ", OPENBLAS_NUM_THREADS=", env_or("OPENBLAS_NUM_THREADS", "unset"),
              "); training sets fp32: ", fp32.describe(), "; bf16: ", bf16.describe(),
              " (train.threads, train.blas_threads)"),
          false, ""};
}

Finding diagnose_blas(const BlasLibrary& blas, const std::string& alternative,
                      const std::set<std::string>& cpu_flags) {
  std::string detail = blas.resolved;
  if (!blas.config.empty())
    detail = detail.empty() ? blas.config : detail + " (" + blas.config + ")";
  if (blas.kind == BlasKind::kReference) {
    return problem("blas", "reference BLAS", detail + ": about 30x slower than OpenBLAS for fp32",
                   alternative.empty() ? "apt install libopenblas0-pthread"
                                       : "select OpenBLAS: update-alternatives --set " +
                                             fs::path(blas.path).filename().string() + "-" +
                                             multiarch_of(blas.resolved) + " " + alternative);
  }
  if (blas.kind == BlasKind::kNone)
    return {"blas", "none found as a shared library",
            "no loaded library provides sgemm_ (LibTorch may carry its own BLAS)", false, ""};
  std::string value = to_string(blas.kind);
  if (!blas.variant.empty() || !blas.core.empty()) {
    value += " (" + blas.variant + (blas.variant.empty() || blas.core.empty() ? "" : ", ") +
             (blas.core.empty() ? "" : blas.core + " kernels") + ")";
  }
  const std::string core_type = fitting_openblas_coretype(cpu_flags);
  if (!core_type.empty() && is_pre_avx2_core(blas.core)) {
    return problem(
        "blas", value,
        cat("OpenBLAS did not recognise this CPU (common in virtual machines) and runs "
            "its ",
            blas.core, " kernels, without AVX2: fp32 matmuls are several times slower; ", detail),
        cat("export OPENBLAS_CORETYPE=", core_type,
            " before starting bigbatch (the kernels for this CPU's ",
            cpu_flags.count("avx512f") > 0 ? "avx512f" : "avx2", ")"));
  }
  return {"blas", value, detail, false, ""};
}

Finding matmul_finding(torch::Dtype dtype, double seconds) {
  const bool bf16 = dtype == torch::kBFloat16;
  const ThreadSettings threads =
      apply_threads(ThreadRequest().backend(bf16 ? MatmulBackend::kOneDnn : MatmulBackend::kBlas));
  const MatmulSpeed speed = measure_matmul(dtype, seconds);
  return {bf16 ? "matmul bf16" : "matmul fp32", format_fixed(speed.gflops, 1) + " GFLOP/s",
          cat(speed.size, "^3 torch::mm x", speed.products, " in ", format_fixed(speed.seconds, 2),
              " s; ", threads.describe()),
          false, ""};
}

Finding onednn_matmul_finding(double seconds) {
  if (!nn::onednn_fp32_available()) {
    return {"matmul fp32 onednn", "not available",
            "oneDNN's float32 kernels need " + nn::onednn_fp32_requirement(), false, ""};
  }
  const ThreadSettings threads = apply_threads(ThreadRequest().backend(MatmulBackend::kOneDnn));
  const MatmulSpeed speed = measure_matmul(torch::kFloat, seconds, nn::onednn_mm);
  const nn::Fp32Matmul automatic =
      nn::resolve_fp32_matmul(nn::Fp32Matmul::kAuto, nn::this_fp32_matmul_facts());
  return {"matmul fp32 onednn", format_fixed(speed.gflops, 1) + " GFLOP/s",
          cat(speed.size, "^3 oneDNN float32 x", speed.products, " in ",
              format_fixed(speed.seconds, 2), " s; ", threads.describe(),
              "; model.fp32_matmul = \"auto\" takes ", nn::to_string(automatic), " here"),
          false, ""};
}

Finding cpu_bf16_finding(const std::set<std::string>& flags, const std::string& model) {
  const bool avx512_bf16 = flags.count("avx512_bf16") > 0;
  const bool amx_bf16 = flags.count("amx_bf16") > 0;
  std::string value =
      cat("avx512_bf16 ", avx512_bf16 ? "yes" : "no", ", amx_bf16 ", amx_bf16 ? "yes" : "no");
  std::string detail = model.empty() ? "" : model + ": ";
  detail += avx512_bf16 || amx_bf16
                ? "bf16 matmuls run natively on oneDNN (model.precision = \"bf16\")"
                : "no native bf16 (oneDNN would emulate it at a fifth of the fp32 rate): "
                  "model.precision = \"bf16\" runs its products on fp32 kernels "
                  "(model.bf16_matmul = \"auto\"): less activation memory, a little slower than "
                  "fp32";
  return {"cpu bf16", value, detail, false, ""};
}

Finding malloc_finding(const MallocLibrary& allocator, MallocTuning tuning) {
  const std::string value =
      to_string(allocator.kind) + (allocator.version.empty() ? "" : " " + allocator.version);
  const std::string where = allocator.resolved.empty() ? "linked statically" : allocator.resolved;
  if (allocator.kind == MallocKind::kMimalloc) {
    if (allocator.serves_libtorch == false) {
      return problem("malloc", value,
                     where + ": loaded, but a block LibTorch allocates is not in its heap",
                     "rebuild with -DBIGBATCH_MIMALLOC=OFF (glibc's malloc) and report this");
    }
    return {"malloc", value,
            where + ": serves every library's malloc (LibTorch's blocks: " +
                (allocator.serves_libtorch ? "yes" : "not checked") +
                "); the bigbatch executable links it (-DBIGBATCH_MIMALLOC=OFF: glibc's)",
            false, ""};
  }
  if (allocator.kind != MallocKind::kGlibc)
    return {"malloc", value, where + ": yours (preloaded or linked); bigbatch sets nothing", false,
            ""};
  std::string settings;
  switch (tuning) {
    case MallocTuning::kSet:
      settings =
          cat("bigbatch set M_MMAP_THRESHOLD ",
              format_bytes(static_cast<int64_t>(kMallocMmapThreshold)), " and M_TRIM_THRESHOLD ",
              format_bytes(static_cast<int64_t>(kMallocTrimThreshold)));
      break;
    case MallocTuning::kUserSettings:
      settings =
          "your settings kept (GLIBC_TUNABLES, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)";
      break;
    case MallocTuning::kRefused:
      settings = "glibc refused bigbatch's thresholds: its defaults";
      break;
    case MallocTuning::kNotRun:
    case MallocTuning::kNotGlibc:
      settings = "its defaults";
      break;
  }
  return {"malloc", value,
          where + ": " + settings + " (an executable built with mimalloc, the default, runs " +
              "small micro-batches faster)",
          false, ""};
}

Finding memory_finding(const MemoryInfo& memory) {
  const std::string value = cat(format_bytes(memory.total_bytes), " total, ",
                                format_bytes(memory.available_bytes), " available");
  if (memory.total_bytes > 0 && memory.available_bytes < kLowMemory) {
    return problem("memory", value, "less than 1 GiB can be allocated without swapping",
                   "close other programs, or train in less: memory.budget with "
                   "batch.micro_batch = \"auto\", or gpt.checkpointing = \"blocks\"");
  }
  return {"memory", value, "/proc/meminfo (MemTotal, MemAvailable)", false, ""};
}

std::vector<Finding> dataset_findings(const DatasetLocations& locations) {
  std::vector<Finding> findings;
  std::error_code error;
  int64_t texts = 0;
  for (const auto& item : fs::directory_iterator(locations.fortunes, error)) {
    if (item.is_regular_file(error) && item.path().extension() != ".dat")
      ++texts;
  }
  if (texts > 0) {
    findings.push_back({"data fortunes", cat(texts, " text files"),
                        locations.fortunes + " (gpt, mlp, bert default)", false, ""});
  } else {
    findings.push_back(problem("data fortunes", "missing",
                               locations.fortunes + " holds no text files (gpt, mlp, bert default)",
                               "apt install fortunes"));
  }
  const std::string fashion =
      locations.fashion_mnist.empty() ? data::kFashionMnistDirectory : locations.fashion_mnist;
  std::vector<std::string> missing;
  for (const char* split : {"train", "test"}) {
    const data::IdxPaths paths = data::fashion_mnist_paths(fashion, split);
    for (const std::string& path : {paths.images, paths.labels}) {
      if (!fs::is_regular_file(path, error))
        missing.push_back(fs::path(path).filename().string());
    }
  }
  if (missing.empty()) {
    findings.push_back({"data fashion-mnist", "4 files", fashion + " (resnet default)", false, ""});
  } else {
    std::string names;
    for (const std::string& name : missing)
      names += (names.empty() ? "" : ", ") + name;
    findings.push_back(problem("data fashion-mnist", "missing",
                               cat(fashion, " lacks ", names, " (resnet default)"),
                               "apt install dataset-fashion-mnist"));
  }
  return findings;
}

Finding run_dir_finding(const std::string& run_dir) {
  std::error_code error;
  const std::string topic = "run_dir";
  const std::string fix_other = "choose a writable directory: --run-dir DIR or train.run_dir";
  if (fs::exists(run_dir, error) && !fs::is_directory(run_dir, error))
    return problem(topic, run_dir, "exists and is not a directory", fix_other);
  const fs::path existing = nearest_existing(run_dir);
  const bool exists = fs::is_directory(run_dir, error);
  if (!fs::is_directory(existing, error)) {
    return problem(topic, run_dir,
                   cat("cannot be created: ", existing.string(), " is not a directory"), fix_other);
  }
  const bool writable =
      exists ? can_create_file_in(run_dir) : ::access(existing.c_str(), W_OK | X_OK) == 0;
  if (!writable) {
    return problem(topic, run_dir,
                   exists ? "is not writable" : cat("cannot be created in ", existing.string()),
                   cat(fix_other, ", or make ", exists ? run_dir : existing.string(),
                       " writable (chmod u+w)"));
  }
  struct statvfs disk {};
  const int64_t free_bytes =
      ::statvfs(existing.c_str(), &disk) == 0
          ? static_cast<int64_t>(disk.f_bavail) * static_cast<int64_t>(disk.f_frsize)
          : -1;
  const std::string where = exists ? "writable" : "will be created in " + existing.string();
  const std::string space =
      free_bytes >= 0 ? format_bytes(free_bytes) + " free" : "free space unknown";
  if (free_bytes >= 0 && free_bytes < kLowDisk) {
    return problem(topic, run_dir, cat(where, "; only ", space),
                   "free disk space (checkpoints, metrics and events need some), or "
                   "choose a run directory on another file system");
  }
  return {topic, run_dir, where + "; " + space, false, ""};
}

}  // namespace bigbatch::cli
