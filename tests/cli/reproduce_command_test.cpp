// `bigbatch reproduce`: an experiment shrunk to seconds leaves its runs, results and chart.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

TEST(ReproduceCommand, EquivalenceShrunkToOneStepWritesRunsResultsAndChart) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist"))
    GTEST_SKIP() << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist";
  testing::TempDir dir;
  const fs::path out = dir.path() / "equivalence";
  const Result result =
      run("reproduce equivalence -s data.subsample=512 -s train.epochs=1 -s train.eval_every=1 "
          "-s train.eval_samples=256 -s resnet.width=4 -s train.threads=1 --out " +
          out.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* id : {"256x1", "64x4", "16x16"}) {
    EXPECT_TRUE(fs::exists(out / id / "summary.json")) << id;
    EXPECT_TRUE(fs::exists(out / (std::string(id) + ".log"))) << id;
  }
  const std::string markdown = testing::read_file(out / "results.md");
  EXPECT_NE(markdown.find("Largest difference in final validation accuracy"), std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("bigbatch train -s model.kind=resnet"), std::string::npos) << markdown;
  EXPECT_NE(testing::read_file(out / "curves.svg").find("<svg"), std::string::npos);
  const auto results = nlohmann::json::parse(testing::read_file(out / "results.json"));
  ASSERT_EQ(results["runs"].size(), 3u);
  // GroupNorm, float32: the three splits of the window compute the same update up to rounding.
  const double first = results["runs"][0]["summary"]["last_val_loss"].get<double>();
  for (const auto& r : results["runs"]) {
    EXPECT_EQ(r["summary"]["steps"], 2);
    EXPECT_NEAR(r["summary"]["last_val_loss"].get<double>(), first, 1e-4) << r.dump();
  }
}

TEST(ReproduceCommand, BadNamesAndSettingsStopBeforeAnythingIsWritten) {
  testing::TempDir dir;
  const fs::path out = dir.path() / "never";
  const Result unknown = run("reproduce nonsense --out " + out.string());
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("equivalence, batchnorm, lr-scaling"), std::string::npos)
      << unknown.output;
  const Result typo = run("reproduce batchnorm -s train.epoch=1 --out " + out.string());
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.output.find("train.epoch"), std::string::npos) << typo.output;
  EXPECT_FALSE(fs::exists(out));
  const Result list = run("reproduce --list");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.output.find("lr-scaling"), std::string::npos) << list.output;
  EXPECT_EQ(run("reproduce").exit_code, 2);
}

}  // namespace
}  // namespace bigbatch
