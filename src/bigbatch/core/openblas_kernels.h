// OpenBLAS's kernels for this CPU. A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels from the
// CPU model when it loads; a CPU it does not recognise (a generic "Intel Xeon Processor" in a
// virtual machine) gets its oldest x86-64 kernels (Prescott, SSE3 only), several times slower on
// an AVX2 or AVX-512 CPU. The environment variable OPENBLAS_CORETYPE overrides the choice, but it
// is read only when OpenBLAS loads, before main(): so the CLI sets it and starts itself again.
#pragma once

#include <optional>
#include <set>
#include <string>

namespace bigbatch {

/// Set in the environment of a process that bigbatch restarted with OPENBLAS_CORETYPE; its value
/// is the core OpenBLAS had chosen before ("Prescott"). Also the guard against a second restart.
inline constexpr const char* kOpenBlasRestartVariable = "BIGBATCH_OPENBLAS_CORE_BEFORE";

/// Whether an OpenBLAS core name (openblas_get_corename: "prescott", "Sandybridge", ...) is an
/// x86 kernel set without AVX2. Case does not matter.
bool is_pre_avx2_core(std::string core);

/// The OPENBLAS_CORETYPE whose kernels fit a CPU with these /proc/cpuinfo flags: "SkylakeX" with
/// avx512f, "Haswell" with avx2, "" otherwise (the older kernels OpenBLAS falls back to fit).
std::string fitting_openblas_coretype(const std::set<std::string>& cpu_flags);

/// What decides the OPENBLAS_CORETYPE restart.
struct OpenBlasKernelFacts {
  std::optional<std::string> coretype_env;  ///< OPENBLAS_CORETYPE as found; nullopt: unset
  bool restarted = false;                   ///< kOpenBlasRestartVariable is set
  std::string core;                         ///< openblas_get_corename(); "" without OpenBLAS
  std::set<std::string> cpu_flags;          ///< the CPU's flags
};

/// The OPENBLAS_CORETYPE to set before starting again, or "" to go on as is: a user's
/// OPENBLAS_CORETYPE (even an empty one) is always kept, a process is restarted at most once, and
/// only kernels without AVX2 (is_pre_avx2_core) on a CPU with better ones
/// (fitting_openblas_coretype) are replaced.
std::string openblas_coretype_to_set(const OpenBlasKernelFacts& facts);

/// The facts of this process: its environment, the loaded OpenBLAS and /proc/cpuinfo.
OpenBlasKernelFacts openblas_kernel_facts();

/// Called first in main(): when openblas_coretype_to_set(openblas_kernel_facts()) names a core
/// type, sets OPENBLAS_CORETYPE to it and kOpenBlasRestartVariable to the core OpenBLAS chose,
/// and executes /proc/self/exe with `argv` again (returning only if that fails, to go on with
/// the slow kernels). Does nothing otherwise.
void fit_openblas_kernels(char** argv);

/// One line on who chose OpenBLAS's kernels, for `bigbatch doctor`:
/// "OPENBLAS_CORETYPE=SkylakeX set by bigbatch at start (OpenBLAS chose Prescott for this CPU)",
/// "OPENBLAS_CORETYPE=Haswell as set in the environment", "OPENBLAS_CORETYPE unset".
std::string describe_openblas_coretype();

}  // namespace bigbatch
