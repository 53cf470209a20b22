// When bigbatch sets glibc's malloc thresholds: unless the user set any malloc setting.
#include "bigbatch/core/malloc_tuning.h"

#include <gtest/gtest.h>

#include "bigbatch/core/system_info.h"

namespace bigbatch {
namespace {

TEST(MallocTuning, SetUnlessTheUserChoseMallocSettings) {
  EXPECT_TRUE(malloc_tuning_wanted(std::nullopt, std::nullopt, std::nullopt));
  EXPECT_TRUE(malloc_tuning_wanted("glibc.cpu.hwcaps=-AVX2", std::nullopt, std::nullopt));
  EXPECT_FALSE(malloc_tuning_wanted("glibc.malloc.trim_threshold=0", std::nullopt, std::nullopt));
  EXPECT_FALSE(malloc_tuning_wanted(std::nullopt, "131072", std::nullopt));
  EXPECT_FALSE(malloc_tuning_wanted(std::nullopt, std::nullopt, "0"));
}

TEST(MallocTuning, TheThresholdsAreOnesGlibcAccepts) {
  EXPECT_LE(kMallocMmapThreshold, size_t{32} << 20);  // mallopt refuses more on 64-bit
  EXPECT_GE(kMallocTrimThreshold, kMallocMmapThreshold);
}

// The test executables run on glibc's malloc: the thresholds are set unless this process's
// environment holds malloc settings, and the outcome is remembered for `bigbatch doctor`.
TEST(MallocTuning, SetsGlibcsThresholdsAndRemembersWhatItDid) {
  const MallocTuning outcome = tune_malloc_for_training();
  const bool wanted = malloc_tuning_wanted(environment_variable("GLIBC_TUNABLES"),
                                           environment_variable("MALLOC_MMAP_THRESHOLD_"),
                                           environment_variable("MALLOC_TRIM_THRESHOLD_"));
  EXPECT_EQ(outcome, wanted ? MallocTuning::kSet : MallocTuning::kUserSettings);
  EXPECT_EQ(malloc_tuning_outcome(), outcome);
}

}  // namespace
}  // namespace bigbatch
