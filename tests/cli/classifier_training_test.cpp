// `bigbatch train` with the classifiers: a ResNet on Fashion-MNIST (IDX files) with the
// BatchNorm policies, a BERT on the fortune collections, and bad data files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

class ClassifierTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFashionMnist))
      GTEST_SKIP() << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist";
  }
  std::string run_dir(const std::string& name) const { return (dir_.path() / name).string(); }
  nlohmann::json summary(const std::string& name) const {
    return nlohmann::json::parse(testing::read_file(fs::path(run_dir(name)) / "summary.json"));
  }
  testing::TempDir dir_;
};

TEST_F(ClassifierTraining, ResNetOnFashionMnistReportsAccuracyAndTheBatchNormNotice) {
  const Result result = run(std::string(kSmallResnet) + "-s train.run_dir=" + run_dir("keep"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("9 BatchNorm layers see micro-batches of 16, not the window of 64"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("512 images 1x28x28, 10 classes"), std::string::npos);
  EXPECT_NE(result.output.find("val_acc "), std::string::npos) << result.output;
  const nlohmann::json s = summary("keep");
  ASSERT_TRUE(s["last_val_accuracy"].is_number()) << s.dump();
  EXPECT_GE(s["last_val_accuracy"].get<double>(), 0.0);
  EXPECT_LE(s["last_val_accuracy"].get<double>(), 1.0);
  EXPECT_LT(s["last_val_loss"].get<double>(), s["first_val_loss"].get<double>()) << s.dump();
}

TEST_F(ClassifierTraining, NormPoliciesGroupAndGhostTrainWithTheSameParameterCount) {
  const Result keep = run(std::string(kSmallResnet) + "--plan");
  const Result group = run(std::string(kSmallResnet) + "--plan -s model.norm_policy=group");
  const Result ghost = run(std::string(kSmallResnet) + "--plan -s model.norm_policy=ghost");
  ASSERT_EQ(group.exit_code, 0) << group.output;
  EXPECT_NE(group.output.find("group norm (BatchNorm replaced, norm_policy = group)"),
            std::string::npos)
      << group.output;
  EXPECT_EQ(group.output.find("BatchNorm layers"), std::string::npos) << group.output;
  EXPECT_NE(ghost.output.find("statistics over ghost batches of 16, running statistics over the "
                              "window of 64"),
            std::string::npos)
      << ghost.output;
  const auto parameters_row = [](const std::string& plan) {
    const size_t at = plan.find("parameters");
    return plan.substr(at, plan.find('\n', at) - at);
  };
  EXPECT_EQ(parameters_row(group.output), parameters_row(keep.output));
  const Result trained = run(std::string(kSmallResnet) +
                             "-s model.norm_policy=ghost -s train.run_dir=" + run_dir("ghost"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(summary("ghost")["last_val_accuracy"].is_number());
}

TEST_F(ClassifierTraining, ResNetWithCheckpointingTrainsLikeWithout) {
  const Result plain = run(std::string(kSmallResnet) + "-s train.run_dir=" + run_dir("plain"));
  const Result checkpointed =
      run(std::string(kSmallResnet) +
          "-s resnet.checkpointing=blocks -s train.run_dir=" + run_dir("checkpointed"));
  ASSERT_EQ(checkpointed.exit_code, 0) << checkpointed.output;
  // Recomputation gives bit-identical gradients and leaves BatchNorm statistics alone.
  EXPECT_EQ(summary("checkpointed")["last_val_loss"], summary("plain")["last_val_loss"]);
  EXPECT_EQ(summary("checkpointed")["last_train_loss"], summary("plain")["last_train_loss"]);
}

TEST_F(ClassifierTraining, BadImageFilesAreNamedAndNothingIsWritten) {
  const fs::path broken = dir_.path() / "broken-idx3-ubyte";
  { std::ofstream(broken) << "not an idx file at all"; }
  const std::string target = run_dir("never");
  const Result wrong = run(std::string(kSmallResnet) + "-s data.train_images=" + broken.string() +
                           " -s train.run_dir=" + target);
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find(broken.string()), std::string::npos) << wrong.output;
  EXPECT_NE(wrong.output.find("magic"), std::string::npos) << wrong.output;
  const Result missing =
      run(std::string(kSmallResnet) +
          "-s data.test_labels=/nonexistent/labels.gz -s train.run_dir=" + target);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/labels.gz"), std::string::npos) << missing.output;
  EXPECT_FALSE(fs::exists(target));
  const Result mismatch =
      run(std::string(kSmallResnet) +
          "-s data.train_labels=/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz "
          "--plan");
  EXPECT_EQ(mismatch.exit_code, 2) << mismatch.output;
  EXPECT_NE(mismatch.output.find("has 10,000 labels"), std::string::npos) << mismatch.output;
}

TEST(BertTraining, LearnsWhichCollectionAFortuneComesFrom) {
  if (!fs::exists("/usr/share/games/fortunes"))
    GTEST_SKIP() << "fortunes is missing: apt-get install fortunes";
  testing::TempDir dir;
  const std::string target = (dir.path() / "bert").string();
  const Result result =
      run("train -s model.kind=bert -s bert.context=64 -s bert.layers=1 -s bert.embed=32 "
          "-s bert.heads=2 -s train.threads=1 -s batch.global_batch=32 -s batch.micro_batch=8 -s "
          "train.steps=4 "
          "-s train.eval_every=0 -s train.eval_samples=64 -s bert.checkpointing=blocks "
          "-s train.run_dir=" +
          target);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("fortunes from 39 collections"), std::string::npos) << result.output;
  const auto s = nlohmann::json::parse(testing::read_file(fs::path(target) / "summary.json"));
  EXPECT_TRUE(s["last_val_accuracy"].is_number());
  const Result no_class = run("train --plan -s model.kind=bert -s data.min_per_class=100000");
  EXPECT_EQ(no_class.exit_code, 2) << no_class.output;
  EXPECT_NE(no_class.output.find("min_per_class"), std::string::npos) << no_class.output;
}

}  // namespace
}  // namespace bigbatch
