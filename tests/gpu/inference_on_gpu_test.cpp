// `bigbatch generate` and `bigbatch predict` with --device cuda: the text and the classes of the
// CPU, and fp16 autocast, which only a GPU has. Each test skips, saying so, where no GPU is
// present (scripts/gpu-check runs them on a machine with one).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "cli/cli_support.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

const std::string kHf = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/";

TEST(InferenceOnGpu, GreedyGenerationGivesTheCpuTextWithAndWithoutTheKvCache) {
  BIGBATCH_REQUIRE_GPU();
  for (const std::string model : {"tiny-llama", "tiny-gemma2"}) {
    const std::string generate =
        "generate " + kHf + model + " --prompt the --max-new-bytes 20 --top-k 1";
    const Result cpu = run(generate + " --device cpu");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
    EXPECT_EQ(run(generate + " --device cuda").output, cpu.output) << model;
    EXPECT_EQ(run(generate + " --device cuda --no-kv-cache").output, cpu.output) << model;
    const Result fp16 = run(generate + " --device cuda --precision fp16");
    EXPECT_EQ(fp16.exit_code, 0) << fp16.output;
  }
}

TEST(InferenceOnGpu, PredictGivesTheCpuClasses) {
  BIGBATCH_REQUIRE_GPU();
  testing::TempDir dir;
  const std::string texts =
      dir.write("texts.txt", "a short text\n%\nanother one, longer than the first\n").string();
  const std::string predict = "predict " + kHf + "tiny-bert --input " + texts + " --top 3";
  const Result cpu = run(predict + " --device cpu");
  const Result gpu = run(predict + " --device cuda");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  // Lines of index, class, probability, class, probability, ...: the same classes in the same
  // order, the probabilities (printed to 4 decimals) within float rounding.
  std::istringstream cpu_lines(cpu.output), gpu_lines(gpu.output);
  std::string cpu_field, gpu_field;
  int field = 0;
  for (; cpu_lines >> cpu_field; ++field) {
    ASSERT_TRUE(gpu_lines >> gpu_field) << gpu.output;
    const int column = field % 7;  // 0: the input's index; odd: a class; even: its probability
    if (column > 0 && column % 2 == 0)
      EXPECT_NEAR(std::stod(gpu_field), std::stod(cpu_field), 2e-4) << gpu.output;
    else
      EXPECT_EQ(gpu_field, cpu_field) << gpu.output;
  }
  EXPECT_EQ(field, 2 * 7);
  EXPECT_FALSE(gpu_lines >> gpu_field) << gpu.output;
}

}  // namespace
}  // namespace bigbatch
