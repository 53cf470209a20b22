// bench/peer.py, the Python loop bench/compare measures bigbatch against, trains the same numbers
// as `bigbatch train` when both start from the same weights (peer.py --save-initial, then
// model.init_from and --init-from) and draw bigbatch's sample order (bench/data_order.py): every
// window's loss agrees to float rounding, across an epoch's end with its short last window and
// partial last sequence. The comparison's fairness rests on this. Skipped, saying so, where the
// build's Python (BIGBATCH_PYTHON, set by scripts/setup) or its torch is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "cli/run_records.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

const char* kPython = BIGBATCH_TEST_PYTHON;

class PeerAgreement : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string unusable = test_python_unusable();
    if (!unusable.empty())
      GTEST_SKIP() << unusable;
  }

  /// bench/peer.py with `arguments`, on one thread.
  Result peer(const std::string& arguments) const {
    return run_shell(cat("OMP_NUM_THREADS=1 ", kPython, " ", BIGBATCH_TEST_DATA_DIR,
                         "/../bench/peer.py --threads 1 ", arguments));
  }

  testing::TempDir dir_;
};

TEST_F(PeerAgreement, TheSameWeightsAndOrderGiveBigbatchsLossesInEveryWindow) {
  // 2,000 bytes: 1,800 to train on in blocks of 200, 113 sequences of 16 (the last one partial),
  // so windows of 16 end epoch 0 with a window of one sample; ten steps run into epoch 1.
  const std::string corpus = dir_.write("corpus.txt", small_corpus().substr(0, 2000)).string();
  const std::string init = (dir_.path() / "init.safetensors").string();
  const std::string model = "--model gpt --data " + corpus +
                            " --gpt-context 16 --gpt-layers 2 --gpt-heads 2 --gpt-embed 16";
  const Result saved = peer(model + " --save-initial " + init);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;

  const std::string run_dir = (dir_.path() / "run").string();
  const Result trained = run(
      "train -s data.path=" + corpus +
      " -s gpt.context=16 -s gpt.layers=2 -s gpt.heads=2 -s gpt.embed=16 -s batch.global_batch=16"
      " -s batch.micro_batch=4 -s train.steps=10 -s train.eval_every=0 -s sample.bytes=0"
      " -s checkpoint.every=0 -s train.threads=1 -s train.blas_threads=1 -s train.eval_samples=32"
      " -s model.init_from=" +
      init + " --run-dir " + run_dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;

  const std::string out = (dir_.path() / "peer.jsonl").string();
  const Result peered =
      peer(model + " --init-from " + init +
           " --global-batch 16 --micro-batch 4 --steps 10 --no-memory --out " + out);
  ASSERT_EQ(peered.exit_code, 0) << peered.output;

  const std::vector<double> ours = window_losses(run_dir);
  const std::vector<double> theirs = json_line_losses(out);
  const std::vector<nlohmann::json> windows = records(run_dir, "window");
  ASSERT_EQ(windows.size(), 10u);
  EXPECT_EQ(windows[7]["samples"].get<int64_t>(), 1);  // epoch 0's last, short window
  EXPECT_EQ(windows[8]["epoch"].get<int64_t>(), 1);
  ASSERT_EQ(ours.size(), 10u);
  ASSERT_EQ(theirs.size(), 10u);
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_NEAR(ours[i], theirs[i], 1e-5 * std::abs(theirs[i])) << "window " << i + 1;
  // Ten steps of AdamW at lr 4e-3 move the loss well past that tolerance: the check can fail.
  EXPECT_GT(std::abs(ours.front() - ours.back()), 1e-3 * std::abs(ours.front()));

  // Another seed's order is other windows: the agreement above is not a coincidence of data.
  const std::string shuffled = (dir_.path() / "shuffled.jsonl").string();
  ASSERT_EQ(
      peer(model + " --init-from " + init +
           " --global-batch 16 --micro-batch 4 --steps 1 --no-memory --seed 2 --out " + shuffled)
          .exit_code,
      0);
  EXPECT_GT(std::abs(json_line_losses(shuffled).front() - ours.front()),
            1e-4 * std::abs(ours.front()));
}

TEST_F(PeerAgreement, AMissingOrForeignInitialFileIsAClearError) {
  const std::string corpus = dir_.write("corpus.txt", small_corpus()).string();
  const std::string model = "--model gpt --data " + corpus +
                            " --gpt-context 16 --gpt-layers 2 "
                            "--gpt-heads 2 --gpt-embed 16 --steps 1 --no-memory --out " +
                            (dir_.path() / "x.jsonl").string();
  const std::string absent = (dir_.path() / "absent.safetensors").string();
  Result result = peer(model + " --init-from " + absent);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("--init-from " + absent), std::string::npos) << result.output;

  const std::string wider = (dir_.path() / "wider.safetensors").string();
  ASSERT_EQ(
      peer("--model gpt --data " + corpus +
           " --gpt-context 16 --gpt-layers 2 --gpt-heads 2 --gpt-embed 32 --save-initial " + wider)
          .exit_code,
      0);
  result = peer(model + " --init-from " + wider);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("size mismatch for tok_embed.weight"), std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace bigbatch
