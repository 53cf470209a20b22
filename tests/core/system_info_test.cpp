// Parsing /proc/cpuinfo and /proc/meminfo.
#include "bigbatch/core/system_info.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace bigbatch {
namespace {

const char* kCpuinfo =
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\nflags2\t: x\n\n"
    "processor\t: 1\nflags\t\t: fpu\n";

TEST(SystemInfo, ParsesTheFirstProcessorsFlagsModelAndVendor) {
  const std::set<std::string> flags = parse_cpu_flags(kCpuinfo);
  EXPECT_EQ(flags, (std::set<std::string>{"fpu", "avx2", "avx512f", "avx512_bf16", "amx_tile"}));
  EXPECT_EQ(parse_cpu_model(kCpuinfo), "Intel(R) Xeon(R) Processor");
  EXPECT_TRUE(parse_cpu_flags("").empty());
  EXPECT_EQ(parse_cpu_model("processor : 0\n"), "");
  EXPECT_EQ(parse_cpu_vendor(kCpuinfo), "GenuineIntel");
  EXPECT_EQ(parse_cpu_vendor("processor : 0\n"), "");
}

TEST(SystemInfo, ParsesMeminfoInBytes) {
  const MemoryInfo m = parse_meminfo(
      "MemTotal:       24684084 kB\nMemFree:        20795108 kB\nMemAvailable:   23536488 kB\n");
  EXPECT_EQ(m.total_bytes, 24684084LL * 1024);
  EXPECT_EQ(m.available_bytes, 23536488LL * 1024);
  EXPECT_EQ(parse_meminfo("MemTotal: 100 kB\n").available_bytes, 0);
}

TEST(SystemInfo, ThisMachinesProcFilesParse) {
  std::ostringstream meminfo;
  meminfo << std::ifstream("/proc/meminfo").rdbuf();
  const MemoryInfo m = parse_meminfo(meminfo.str());
  EXPECT_GT(m.total_bytes, 0);
  EXPECT_GT(m.available_bytes, 0);
  EXPECT_LE(m.available_bytes, m.total_bytes);
  std::ostringstream cpuinfo;
  cpuinfo << std::ifstream("/proc/cpuinfo").rdbuf();
  EXPECT_FALSE(parse_cpu_flags(cpuinfo.str()).empty());
  EXPECT_EQ(this_cpu_flags(), parse_cpu_flags(cpuinfo.str()));
  EXPECT_EQ(&this_cpu_flags(), &this_cpu_flags());  // read once
}

TEST(SystemInfo, EnvironmentVariablesTellUnsetFromEmpty) {
  ::unsetenv("BIGBATCH_TEST_VARIABLE");
  EXPECT_FALSE(environment_variable("BIGBATCH_TEST_VARIABLE").has_value());
  ::setenv("BIGBATCH_TEST_VARIABLE", "", 1);
  EXPECT_EQ(environment_variable("BIGBATCH_TEST_VARIABLE"), std::optional<std::string>(""));
  ::setenv("BIGBATCH_TEST_VARIABLE", "SkylakeX", 1);
  EXPECT_EQ(environment_variable("BIGBATCH_TEST_VARIABLE"), std::optional<std::string>("SkylakeX"));
  ::unsetenv("BIGBATCH_TEST_VARIABLE");
}

}  // namespace
}  // namespace bigbatch
