// `bigbatch bench memory` on a CUDA GPU: the breakdown (weights, gradients, optimizer state,
// activations) from the caching allocator, and the budget through its memory fraction. Each test
// skips, saying so, where no GPU is present.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_support.h"
#include "gpu/gpu_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

const char* kSmallGpt =
    "-s gpt.layers=2 -s gpt.embed=32 -s gpt.heads=2 -s gpt.context=32 -s batch.global_batch=16 "
    "-s data.split_block=512 -s train.device=cuda ";

TEST(BenchMemoryOnGpu, TheBreakdownAddsUpAndActivationsGrowWithTheMicroBatch) {
  BIGBATCH_REQUIRE_GPU();
  testing::TempDir dir;
  const fs::path corpus = dir.write("corpus.txt", small_corpus());
  const std::string out = (dir.path() / "bench").string();
  const Result r = run("bench memory -s data.path='" + corpus.string() + "' " + kSmallGpt +
                       "--micro-batches 2,4,16 --checkpointing none,blocks --steps 1 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on cuda:0"), std::string::npos) << r.output;
  const auto report = nlohmann::json::parse(testing::read_file(fs::path(out) / "bench.json"));
  EXPECT_EQ(report["device"], "cuda:0");
  std::map<std::pair<std::string, int64_t>, nlohmann::json> points;
  for (const auto& point : report["points"]) {
    ASSERT_TRUE(point["fits"].get<bool>()) << point.dump();
    EXPECT_EQ(point["peak_bytes"].get<int64_t>(),
              point["parameter_bytes"].get<int64_t>() + point["gradient_bytes"].get<int64_t>() +
                  point["optimizer_state_bytes"].get<int64_t>() +
                  point["activation_bytes"].get<int64_t>());
    EXPECT_GT(point["parameter_bytes"].get<int64_t>(), 0);
    points[{point["checkpointing"].get<std::string>(), point["micro_batch"].get<int64_t>()}] =
        point;
  }
  for (const std::string policy : {"none", "blocks"})
    EXPECT_LT(points.at({policy, 2})["activation_bytes"],
              points.at({policy, 16})["activation_bytes"]);
  EXPECT_LT(points.at({"blocks", 16})["activation_bytes"],
            points.at({"none", 16})["activation_bytes"]);
}

}  // namespace
}  // namespace bigbatch
