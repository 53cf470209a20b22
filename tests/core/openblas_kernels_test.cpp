// The OPENBLAS_CORETYPE decision of the CLI's start, on given facts.
#include "bigbatch/core/openblas_kernels.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace bigbatch {
namespace {

OpenBlasKernelFacts prescott_on(std::set<std::string> flags) {
  OpenBlasKernelFacts facts;
  facts.core = "Prescott";  // DYNAMIC_ARCH's fallback for a CPU model it does not know
  facts.cpu_flags = std::move(flags);
  return facts;
}

TEST(OpenBlasKernels, OldKernelsAreTheOnesWithoutAvx2) {
  for (const char* core : {"Prescott", "prescott", "Core2", "Nehalem", "Sandybridge", "ATOM"})
    EXPECT_TRUE(is_pre_avx2_core(core)) << core;
  for (const char* core : {"Haswell", "SkylakeX", "Zen", "CooperLake", "", "armv8"})
    EXPECT_FALSE(is_pre_avx2_core(core)) << core;
}

TEST(OpenBlasKernels, TheFittingCoreTypeFollowsTheCpuFlags) {
  EXPECT_EQ(fitting_openblas_coretype({"avx2", "avx512f", "fma"}), "SkylakeX");
  EXPECT_EQ(fitting_openblas_coretype({"avx", "avx2", "fma"}), "Haswell");
  EXPECT_EQ(fitting_openblas_coretype({"sse3", "avx"}), "");
  EXPECT_EQ(fitting_openblas_coretype({}), "");
}

TEST(OpenBlasKernels, OldKernelsOnABetterCpuAreReplacedOnce) {
  EXPECT_EQ(openblas_coretype_to_set(prescott_on({"avx2", "avx512f"})), "SkylakeX");
  EXPECT_EQ(openblas_coretype_to_set(prescott_on({"avx2"})), "Haswell");
  OpenBlasKernelFacts restarted = prescott_on({"avx2", "avx512f"});
  restarted.restarted = true;  // the restart did not help: no second one
  EXPECT_EQ(openblas_coretype_to_set(restarted), "");
}

TEST(OpenBlasKernels, AUsersValueAlwaysWins) {
  for (const char* value : {"Prescott", "Haswell", ""}) {
    OpenBlasKernelFacts facts = prescott_on({"avx2", "avx512f"});
    facts.coretype_env = value;
    EXPECT_EQ(openblas_coretype_to_set(facts), "") << value;
  }
}

TEST(OpenBlasKernels, FittingKernelsOrNoOpenBlasAreLeftAlone) {
  OpenBlasKernelFacts facts = prescott_on({"sse3"});  // right for an old CPU
  EXPECT_EQ(openblas_coretype_to_set(facts), "");
  facts = prescott_on({"avx2", "avx512f"});
  facts.core = "SkylakeX";
  EXPECT_EQ(openblas_coretype_to_set(facts), "");
  facts.core = "";  // LibTorch on another BLAS
  EXPECT_EQ(openblas_coretype_to_set(facts), "");
}

TEST(OpenBlasKernels, TheDescriptionSaysWhoSetTheCoreType) {
  const char* saved = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved_value = saved != nullptr ? saved : "";
  const char* before = std::getenv(kOpenBlasRestartVariable);
  const std::string before_value = before != nullptr ? before : "";

  ::unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(describe_openblas_coretype(), "OPENBLAS_CORETYPE unset");
  ::setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  ::unsetenv(kOpenBlasRestartVariable);
  EXPECT_EQ(describe_openblas_coretype(), "OPENBLAS_CORETYPE=Haswell as set in the environment");
  ::setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  ::setenv(kOpenBlasRestartVariable, "Prescott", 1);
  EXPECT_EQ(describe_openblas_coretype().rfind("OPENBLAS_CORETYPE=SkylakeX set by bigbatch at "
                                               "start (OpenBLAS chose Prescott kernels",
                                               0),
            0u)
      << describe_openblas_coretype();

  if (saved != nullptr)
    ::setenv("OPENBLAS_CORETYPE", saved_value.c_str(), 1);
  else
    ::unsetenv("OPENBLAS_CORETYPE");
  if (before != nullptr)
    ::setenv(kOpenBlasRestartVariable, before_value.c_str(), 1);
  else
    ::unsetenv(kOpenBlasRestartVariable);
}

}  // namespace
}  // namespace bigbatch
