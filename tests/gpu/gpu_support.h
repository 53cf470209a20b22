// What the GPU tests share: the skip that says no GPU is present, and runs of the real binary on
// a GPU.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "bigbatch/core/device.h"

namespace bigbatch::testing {

/// Why this process cannot train on a GPU, or "" when it can.
inline std::string why_no_gpu() {
  const CudaAvailability cuda = cuda_availability();
  if (!cuda.built_with_cuda)
    return "no GPU present: this build of bigbatch has no CUDA (a CPU-only LibTorch)";
  if (cuda.device_count == 0)
    return "no GPU present: this CUDA build sees no device (`bigbatch doctor` says why)";
  return "";
}

}  // namespace bigbatch::testing

/// Skips the test, saying that no GPU is present and why, unless one is.
#define BIGBATCH_REQUIRE_GPU()                                 \
  do {                                                         \
    const std::string why = ::bigbatch::testing::why_no_gpu(); \
    if (!why.empty())                                          \
      GTEST_SKIP() << why;                                     \
  } while (false)
