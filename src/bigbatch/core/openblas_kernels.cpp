#include "bigbatch/core/openblas_kernels.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "bigbatch/core/loaded_library.h"
#include "bigbatch/core/system_info.h"

namespace bigbatch {
namespace {

/// openblas_get_corename(), looked up at run time (LibTorch's BLAS is not always OpenBLAS).
std::string loaded_openblas_core() {
  using GetString = char* (*)();
  const auto get = loaded_function<GetString>("openblas_get_corename");
  return get != nullptr ? std::string(get()) : std::string();
}

}  // namespace

bool is_pre_avx2_core(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::set<std::string> kOld = {"katmai",     "coppermine", "northwood",  "prescott",
                                             "banias",     "atom",       "core2",      "penryn",
                                             "dunnington", "nehalem",    "sandybridge"};
  return kOld.count(core) > 0;
}

std::string fitting_openblas_coretype(const std::set<std::string>& cpu_flags) {
  if (cpu_flags.count("avx512f") > 0)
    return "SkylakeX";
  return cpu_flags.count("avx2") > 0 ? "Haswell" : "";
}

std::string openblas_coretype_to_set(const OpenBlasKernelFacts& facts) {
  if (facts.coretype_env.has_value() || facts.restarted || !is_pre_avx2_core(facts.core))
    return "";
  return fitting_openblas_coretype(facts.cpu_flags);
}

OpenBlasKernelFacts openblas_kernel_facts() {
  OpenBlasKernelFacts facts;
  facts.coretype_env = environment_variable("OPENBLAS_CORETYPE");
  facts.restarted = environment_variable(kOpenBlasRestartVariable).has_value();
  facts.core = loaded_openblas_core();
  if (is_pre_avx2_core(facts.core))  // only then do the flags matter
    facts.cpu_flags = this_cpu_flags();
  return facts;
}

void fit_openblas_kernels(char** argv) {
  const OpenBlasKernelFacts facts = openblas_kernel_facts();
  const std::string coretype = openblas_coretype_to_set(facts);
  if (coretype.empty())
    return;
  ::setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
  ::setenv(kOpenBlasRestartVariable, facts.core.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // Only reached when the restart failed: go on with the kernels OpenBLAS chose, as before.
  ::unsetenv("OPENBLAS_CORETYPE");
}

std::string describe_openblas_coretype() {
  const std::optional<std::string> coretype = environment_variable("OPENBLAS_CORETYPE");
  if (!coretype.has_value())
    return "OPENBLAS_CORETYPE unset";
  const std::optional<std::string> before = environment_variable(kOpenBlasRestartVariable);
  if (before.has_value()) {
    return "OPENBLAS_CORETYPE=" + *coretype + " set by bigbatch at start (OpenBLAS chose " +
           *before + " kernels for this CPU; a value set in the environment is kept)";
  }
  return "OPENBLAS_CORETYPE=" + *coretype + " as set in the environment";
}

}  // namespace bigbatch
