// When bigbatch sets glibc's malloc thresholds: unless the user set any malloc setting.
#include "bigbatch/core/malloc_tuning.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bigbatch
