// Which BLAS library this process really calls: the one that provides sgemm_.
#pragma once

#include <string>

namespace bigbatch {

/// The BLAS implementations bigbatch tells apart.
enum class BlasKind {
  kOpenBlas,   ///< OpenBLAS (Debian's libopenblas0-pthread, -openmp or -serial)
  kReference,  ///< Netlib's reference BLAS (Debian's libblas3): about 30x slower
  kBlis,       ///< BLIS
  kAtlas,      ///< ATLAS
  kMkl,        ///< Intel MKL
  kOther,      ///< something else provides sgemm_
  kNone,       ///< no shared library provides sgemm_ and LibTorch has no MKL linked in
};

/// "OpenBLAS", "reference BLAS", "BLIS", "ATLAS", "MKL", "unknown BLAS" or "none found".
std::string to_string(BlasKind kind);

/// Which BLAS a library file is, from its path with symbolic links resolved (Debian installs
/// BLAS implementations as alternatives: .../openblas-pthread/libblas.so.3,
/// .../blas/libblas.so.3, .../blis-openmp/libblas.so.3, .../atlas/libblas.so.3).
BlasKind classify_blas_path(const std::string& resolved_path);

/// The BLAS in use.
struct BlasLibrary {
  BlasKind kind = BlasKind::kNone;
  /// The file that provides sgemm_, as loaded (libtorch_cpu.so for the PyTorch wheel's MKL,
  /// whose config then says "linked into LibTorch"); empty for kNone.
  std::string path;
  std::string resolved;  ///< that path with symbolic links resolved
  /// OpenBLAS only: openblas_get_config() ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX
  /// MAX_THREADS=64") and the threading variant from Debian's directory name ("pthread",
  /// "openmp", "serial"), where known.
  std::string config;
  std::string variant;
  /// OpenBLAS only: the kernels it chose for this CPU, openblas_get_corename() ("skylakex",
  /// "haswell", "prescott": the fallback of a DYNAMIC_ARCH build for a CPU it does not recognise).
  std::string core;
};

/// Finds the library that provides the sgemm_ symbol LibTorch calls (dlsym + dladdr) and what it
/// is.
BlasLibrary loaded_blas();

}  // namespace bigbatch
