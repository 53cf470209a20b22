// An export computes the same logits in Python PyTorch (python/bigbatch_torch.py) as in bigbatch:
// for the gpt, mlp, resnet (batch and group norm) and bert, a model trained for two steps is
// exported, its logits for fixed inputs written beside it, and tests/cli/check_export.py loads
// the export and compares (max abs difference <= 1e-5). Skipped, saying so, where the build's
// Python (BIGBATCH_PYTHON, set by scripts/setup) or its torch module is missing.
#include <gtest/gtest.h>

#include "bigbatch/io/safetensors.h"
#include "bigbatch/models/model_export.h"
#include "cli/cli_support.h"
#include "support/export_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

const char* kPython = BIGBATCH_TEST_PYTHON;

class ExportRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string unusable = test_python_unusable();
    if (!unusable.empty())
      GTEST_SKIP() << unusable;
  }

  /// Exports a trained model of `spec`, writes its logits for fixed inputs and runs the Python
  /// check on them.
  void check(const models::ModelSpec& spec) {
    const models::BuiltModel model = testing::trained_model(spec, 11);
    const std::string out = (dir_.path() / "model.safetensors").string();
    models::export_model(*model.module, spec, out);
    const torch::Tensor inputs = testing::sample_inputs(spec, 4, 23);
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = model.forward(inputs);  // (B, [T,] V), eval mode
    }
    const std::string expected = (dir_.path() / "expected.safetensors").string();
    io::write_safetensors(expected, {{"inputs", inputs}, {"logits", logits}});
    const Result result = run_shell(cat(kPython, " ", BIGBATCH_TEST_DATA_DIR,
                                        "/cli/check_export.py ", out, " ", expected, " 1e-5"));
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("max_abs_diff"), std::string::npos) << result.output;
  }

  testing::TempDir dir_;
};

TEST_F(ExportRoundTrip, Gpt) {
  check(testing::small_spec(models::ModelKind::kGpt));
}

TEST_F(ExportRoundTrip, GptInFloat64) {
  models::ModelSpec spec = testing::small_spec(models::ModelKind::kGpt);
  spec.float64 = true;
  check(spec);
}

TEST_F(ExportRoundTrip, Mlp) {
  check(testing::small_spec(models::ModelKind::kMlp));
}

TEST_F(ExportRoundTrip, ResNetWithBatchNormRunningStatistics) {
  check(testing::small_spec(models::ModelKind::kResnet, nn::NormKind::kBatch));
}

TEST_F(ExportRoundTrip, ResNetWithGroupNorm) {
  check(testing::small_spec(models::ModelKind::kResnet, nn::NormKind::kGroup));
}

TEST_F(ExportRoundTrip, BertWithPadding) {
  check(testing::small_spec(models::ModelKind::kBert));
}

}  // namespace
}  // namespace bigbatch
