// `bigbatch export RUN_DIR`: a trained run's checkpoint leaves bigbatch as safetensors + spec,
// loads back bitwise, runs in Python PyTorch with the same logits, and feeds generate / predict.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/models/model_export.h"
#include "cli/cli_support.h"
#include "support/export_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

class ExportCommand : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }
  std::string train_gpt(const std::string& name) {
    const fs::path corpus = dir_.write("corpus.txt", small_corpus());
    const std::string run_dir = path(name);
    const Result r = run("train -s data.path='" + corpus.string() + "' " + tiny_gpt_settings() +
                         " -s train.steps=3 --run-dir " + run_dir);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return run_dir;
  }

  testing::TempDir dir_;
};

TEST_F(ExportCommand, ExportsTheNewestCheckpointsWeightsBitwiseAndGenerateRunsOnThem) {
  const std::string run_dir = train_gpt("gpt");
  const std::string out = path("gpt.safetensors");
  const Result r = run("export " + run_dir + " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string checkpoint = run_dir + "/checkpoints/step-00000003.ckpt";
  EXPECT_NE(r.output.find("from " + checkpoint + " (optimizer step 3)"), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(path("gpt.json")));

  const models::ExportedModel exported = models::load_exported(out);
  models::BuiltModel fresh = models::build_model(exported.spec);
  engine::load_model_weights(checkpoint, *fresh.module);
  testing::expect_same_state(*exported.model.module, *fresh.module);
  const Result generated = run("generate " + out + " --prompt 'The ' --max-new-bytes 10");
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
}

TEST_F(ExportCommand, AnExistingExportIsReplacedOnlyWithOverwrite) {
  const std::string run_dir = train_gpt("gpt");
  const std::string out = path("gpt.safetensors");
  ASSERT_EQ(run("export " + run_dir + " --out " + out).exit_code, 0);
  const std::string first = testing::read_file(out);

  // The spec alone in the way stops it too: the pair is written together or not at all.
  fs::rename(out, path("kept.safetensors"));
  const Result again = run("export " + run_dir + " --out " + out);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find(path("gpt.json") + " already exists; choose another path or pass "
                                                 "--overwrite"),
            std::string::npos)
      << again.output;
  EXPECT_FALSE(fs::exists(out));

  fs::rename(path("kept.safetensors"), out);
  const Result replaced = run("export " + run_dir + " --out " + out + " --overwrite");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_EQ(testing::read_file(out), first);
}

TEST_F(ExportCommand, ARunDirectoryGivenForAnExportSaysToExportIt) {
  const std::string run_dir = train_gpt("gpt");
  const Result generated = run("generate " + run_dir + " --prompt 'The '");
  EXPECT_EQ(generated.exit_code, 2) << generated.output;
  EXPECT_NE(generated.output.find(run_dir +
                                  " is a bigbatch run directory, not a Hugging Face "
                                  "model directory (which holds config.json); "
                                  "`bigbatch export " +
                                  run_dir + " --out PATH`"),
            std::string::npos)
      << generated.output;
  const Result started = run("train -s model.init_from=" + run_dir + " --run-dir " + path("x"));
  EXPECT_EQ(started.exit_code, 2) << started.output;
  EXPECT_NE(started.output.find("cannot read " + run_dir + ": it is a directory, not a file"),
            std::string::npos)
      << started.output;
  EXPECT_FALSE(fs::exists(path("x")));
}

TEST_F(ExportCommand, ATrainedResnetGivesTheSameLogitsInPythonAndPredictLabelsImages) {
  if (!fs::exists(kFashionMnist))
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  const std::string run_dir = path("resnet");
  // The classifier tests' small ResNet, narrower and shorter.
  const Result trained =
      run(std::string(kSmallResnet) + "-s resnet.width=4 -s train.steps=4 --run-dir " + run_dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string out = path("resnet.safetensors");
  ASSERT_EQ(run("export " + run_dir + " --out " + out).exit_code, 0);

  const models::ExportedModel exported = models::load_exported(out);
  EXPECT_EQ(exported.spec.class_names.front(), "T-shirt/top");
  const Result predicted = run(
      "predict " + out + " --input /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(predicted.exit_code, 0) << predicted.output.substr(0, 2000);

  const std::string unusable = test_python_unusable();
  if (!unusable.empty())
    GTEST_SKIP() << unusable;
  const std::string python = BIGBATCH_TEST_PYTHON;
  const torch::Tensor inputs = testing::sample_inputs(exported.spec, 8, 5);  // (8, 1, 28, 28)
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = exported.model.forward(inputs);  // (8, 10)
  }
  const std::string expected = path("expected.safetensors");
  io::write_safetensors(expected, {{"inputs", inputs}, {"logits", logits}});
  const Result checked = run_shell(python + " " + std::string(BIGBATCH_TEST_DATA_DIR) +
                                   "/cli/check_export.py " + out + " " + expected + " 1e-5");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
}

TEST_F(ExportCommand, ARunWithoutCheckpointsOrABadCheckpointIsAClearError) {
  fs::create_directories(path("empty/checkpoints"));
  const Result empty = run("export " + path("empty") + " --out " + path("x.safetensors"));
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("no checkpoint in " + path("empty") + "/checkpoints"),
            std::string::npos)
      << empty.output;

  std::ofstream(path("bad.ckpt")) << "not a checkpoint at all, but long enough to have a preamble";
  const Result bad = run("export " + path("empty") + " --checkpoint " + path("bad.ckpt") +
                         " --out " + path("x.safetensors"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(path("bad.ckpt") + ": not a bigbatch checkpoint"), std::string::npos)
      << bad.output;
  EXPECT_FALSE(fs::exists(path("x.safetensors")));

  const Result missing = run("export " + path("nowhere") + " --out " + path("x.safetensors"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find(path("nowhere") + " is not a directory"), std::string::npos)
      << missing.output;
}

TEST_F(ExportCommand, AnExportIsWhereANewRunCanStartAndAMissingOneStopsItEarly) {
  const std::string run_dir = train_gpt("gpt");
  const std::string out = path("gpt.safetensors");
  ASSERT_EQ(run("export " + run_dir + " --out " + out).exit_code, 0);
  const std::string corpus = path("corpus.txt");
  const std::string settings = "-s data.path='" + corpus + "' " + tiny_gpt_settings();
  const Result started = run("train " + settings + " -s train.steps=1 -s model.init_from=" + out +
                             " --run-dir " + path("continued"));
  ASSERT_EQ(started.exit_code, 0) << started.output;
  EXPECT_NE(started.output.find("init_from"), std::string::npos) << started.output;
  EXPECT_NE(started.output.find(out), std::string::npos) << started.output;

  const Result missing = run("train " + settings + " -s train.steps=1 -s model.init_from=" +
                             path("nowhere.safetensors") + " --run-dir " + path("never"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find(path("nowhere.safetensors")), std::string::npos) << missing.output;
  EXPECT_FALSE(fs::exists(path("never")));

  const Result wider = run("train " + settings + " -s gpt.embed=32 -s train.steps=1 " +
                           "-s model.init_from=" + out + " --run-dir " + path("wider"));
  EXPECT_EQ(wider.exit_code, 2) << wider.output;
  EXPECT_NE(wider.output.find("has shape [256, 16], the gpt model needs [256, 32]"),
            std::string::npos)
      << wider.output;
  EXPECT_FALSE(fs::exists(path("wider")));
}

}  // namespace
}  // namespace bigbatch
