#include "bigbatch/core/blas_library.h"

#include <ATen/Context.h>
#include <dlfcn.h>

#include <filesystem>

#include "bigbatch/core/loaded_library.h"

namespace bigbatch {

namespace {

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

using GetString = char* (*)();

/// `blas` marked as the MKL that LibTorch links in (the PyTorch wheel's), which runs on the
/// OpenMP threads.
BlasLibrary mkl_inside_libtorch(BlasLibrary blas) {
  blas.kind = BlasKind::kMkl;
  blas.config = "linked into LibTorch, on the OpenMP threads";
  return blas;
}

}  // namespace

std::string to_string(BlasKind kind) {
  switch (kind) {
    case BlasKind::kOpenBlas:
      return "OpenBLAS";
    case BlasKind::kReference:
      return "reference BLAS";
    case BlasKind::kBlis:
      return "BLIS";
    case BlasKind::kAtlas:
      return "ATLAS";
    case BlasKind::kMkl:
      return "MKL";
    case BlasKind::kOther:
      return "unknown BLAS";
    case BlasKind::kNone:
      break;
  }
  return "none found";
}

BlasKind classify_blas_path(const std::string& resolved_path) {
  const std::string name = std::filesystem::path(resolved_path).filename().string();
  const std::string dir = std::filesystem::path(resolved_path).parent_path().filename().string();
  if (contains(name, "openblas") || contains(dir, "openblas"))
    return BlasKind::kOpenBlas;
  if (contains(name, "blis") || contains(dir, "blis"))
    return BlasKind::kBlis;
  if (contains(name, "atlas") || contains(dir, "atlas"))
    return BlasKind::kAtlas;
  if (contains(name, "mkl") || contains(dir, "mkl"))
    return BlasKind::kMkl;
  if (dir == "blas" && name.rfind("libblas.so", 0) == 0)
    return BlasKind::kReference;
  return BlasKind::kOther;
}

BlasLibrary loaded_blas() {
  BlasLibrary blas;
  const std::optional<LoadedLibrary> sgemm = library_providing("sgemm_");
  if (!sgemm)
    return at::hasMKL() ? mkl_inside_libtorch(blas) : blas;  // an MKL that exports no sgemm_
  blas.path = sgemm->path;
  blas.resolved = sgemm->resolved;
  blas.kind = classify_blas_path(blas.resolved);
  const std::string file = std::filesystem::path(blas.resolved).filename().string();
  if (blas.kind == BlasKind::kOther && at::hasMKL() && file.rfind("libtorch", 0) == 0)
    return mkl_inside_libtorch(blas);  // the PyTorch wheel's: sgemm_ is libtorch_cpu.so's
  if (blas.kind != BlasKind::kOpenBlas)
    return blas;
  const std::string dir = std::filesystem::path(blas.resolved).parent_path().filename().string();
  for (const char* variant : {"pthread", "openmp", "serial"}) {
    if (dir == std::string("openblas-") + variant)
      blas.variant = variant;
  }
  // Debian's .../openblas-pthread/libblas.so.3 forwards to libopenblas.so.0, which holds the
  // configuration string and core name; look them up from the library that provides sgemm_ (its
  // dependencies included).
  if (void* handle = dlopen(blas.path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
    if (const auto get = reinterpret_cast<GetString>(dlsym(handle, "openblas_get_config")))
      blas.config = get();
    if (const auto get = reinterpret_cast<GetString>(dlsym(handle, "openblas_get_corename")))
      blas.core = get();
    dlclose(handle);
  }
  return blas;
}

}  // namespace bigbatch
