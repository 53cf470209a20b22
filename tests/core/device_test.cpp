// The device setting: every spelling, and every device that cannot be used refused with why.
#include "bigbatch/core/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/test_support.h"

namespace bigbatch {
namespace {

using bigbatch::testing::input_error_of;
using ::testing::HasSubstr;

constexpr CudaAvailability kCpuOnlyBuild{false, 0};
constexpr CudaAvailability kNoGpu{true, 0};
constexpr CudaAvailability kTwoGpus{true, 2};

TEST(ParseDevice, EverySpelling) {
  EXPECT_EQ(parse_device("cpu", kTwoGpus, "train.device"), c10::Device(c10::kCPU));
  EXPECT_EQ(parse_device("cuda", kTwoGpus, "train.device"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(parse_device("cuda:1", kTwoGpus, "train.device"), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(parse_device("cpu", kCpuOnlyBuild, "train.device"), c10::Device(c10::kCPU));
}

TEST(ParseDevice, AutoTakesTheFirstGpuWhenBuildAndMachineHaveOne) {
  EXPECT_EQ(parse_device("auto", kTwoGpus, "f"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(parse_device("auto", kNoGpu, "f"), c10::Device(c10::kCPU));
  EXPECT_EQ(parse_device("auto", kCpuOnlyBuild, "f"), c10::Device(c10::kCPU));
}

TEST(ParseDevice, UnusableDevicesSayWhy) {
  EXPECT_THAT(input_error_of([] { parse_device("gpu", kTwoGpus, "train.device"); }),
              HasSubstr("train.device = \"gpu\" is not a device; expected \"auto\", \"cpu\", "
                        "\"cuda\" or \"cuda:N\""));
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "CUDA", "cuda:0:1"}) {
    EXPECT_THAT(input_error_of([&] { parse_device(bad, kTwoGpus, "f"); }),
                HasSubstr("is not a device"))
        << bad;
  }
  EXPECT_THAT(input_error_of([] { parse_device("cuda", kCpuOnlyBuild, "train.device"); }),
              HasSubstr("train.device = \"cuda\": this LibTorch has no CUDA (a CPU-only build)"));
  EXPECT_THAT(input_error_of([] { parse_device("cuda:0", kNoGpu, "train.device"); }),
              HasSubstr("train.device = \"cuda:0\": no GPU is visible to this process"));
  EXPECT_THAT(input_error_of([] { parse_device("cuda:2", kTwoGpus, "train.device"); }),
              HasSubstr("train.device = \"cuda:2\": the index is out of range: 2 GPUs are "
                        "visible (cuda:0 to cuda:1)"));
  EXPECT_THAT(input_error_of([] {
                parse_device("cuda:1", CudaAvailability{true, 1}, "f");
              }),
              HasSubstr("1 GPU is visible (cuda:0)"));
}

TEST(RankDevice, OneGpuPerRankOnItsMachine) {
  EXPECT_EQ(rank_device(c10::Device(c10::kCPU), 3, kTwoGpus), c10::Device(c10::kCPU));
  EXPECT_EQ(rank_device(c10::Device(c10::kCUDA, 0), 1, kTwoGpus), c10::Device(c10::kCUDA, 1));
  EXPECT_THAT(input_error_of([] { rank_device(c10::Device(c10::kCUDA, 0), 2, kTwoGpus); }),
              HasSubstr("rank with LOCAL_RANK=2 has no GPU of its own: 2 GPUs are visible"));
}

TEST(CudaAvailability, ThisBuildAndMachine) {
  const CudaAvailability cuda = cuda_availability();
#ifdef BIGBATCH_WITH_CUDA
  EXPECT_TRUE(cuda.built_with_cuda);
#else
  EXPECT_FALSE(cuda.built_with_cuda);
  EXPECT_EQ(cuda.device_count, 0);
#endif
  EXPECT_GE(cuda.device_count, 0);
  EXPECT_EQ(describe_device(c10::Device(c10::kCPU)), "cpu");
  EXPECT_EQ(device_memory_bytes(c10::Device(c10::kCPU)), 0);
}

}  // namespace
}  // namespace bigbatch
