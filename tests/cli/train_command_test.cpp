// `bigbatch` as a user runs it: the real binary, its exit codes, messages and run directory.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bigbatch/core/device.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "cli/cli_support.h"
#include "cli/run_records.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

/// A tiny, fast GPT run on the small corpus.
const char* kTinyGpt =
    "-s gpt.layers=1 -s gpt.embed=16 -s gpt.heads=2 -s gpt.context=16 -s batch.global_batch=16 "
    "-s batch.micro_batch=4 -s data.split_block=512 -s train.eval_every=2 -s train.eval_samples=32 "
    "-s sample.bytes=20";

class TrainCommand : public ::testing::Test {
 protected:
  void SetUp() override { corpus_ = dir_.write("corpus.txt", small_corpus()); }
  std::string corpus_arg() const { return "-s data.path='" + corpus_.string() + "' "; }
  std::string run_dir(const std::string& name) const { return (dir_.path() / name).string(); }

  testing::TempDir dir_;
  fs::path corpus_;
};

TEST_F(TrainCommand, TrainsAndWritesAFinishedRunDirectory) {
  const std::string out = run_dir("run");
  const Result r = run("train " + corpus_arg() + kTinyGpt + " --steps 4 --run-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("global_batch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 x 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val_loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sample (temperature"), std::string::npos) << r.output;
  for (const char* file : {"config.toml", "plan.txt", "metrics.jsonl", "summary.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / file)) << file;
  }
  const std::vector<nlohmann::json> windows = records(out, "window");
  ASSERT_EQ(windows.size(), 4u);
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(windows[i]["step"], i + 1);
    EXPECT_EQ(windows[i]["samples"], 16);
    EXPECT_EQ(windows[i]["micro_batches"], 4);
  }
  EXPECT_EQ(records(out, "eval").size(), 3u);  // before training, after step 2, after step 4
  const auto summary = nlohmann::json::parse(testing::read_file(fs::path(out) / "summary.json"));
  EXPECT_EQ(summary["finished"], true);
  EXPECT_EQ(summary["steps"], 4);
  EXPECT_LT(summary["last_val_loss"].get<double>(), summary["first_val_loss"].get<double>());

  // The resolved config reproduces the run's plan.
  const Result again = run("train --plan --config " + out + "/config.toml");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("4 x 4"), std::string::npos) << again.output;
}

TEST_F(TrainCommand, TrainsTheMlpWithSampleLosses) {
  const Result r = run("train " + corpus_arg() +
                       "-s model.kind=mlp -s mlp.hidden=32 -s batch.global_batch=32 "
                       "-s batch.micro_batch=12 -s data.split_block=512 -s train.eval_samples=64 "
                       "--steps 3 --run-dir " +
                       run_dir("mlp"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 x 12 + 8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("per sample"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(run_dir("mlp")) / "summary.json"));
}

/// A bad input: exit code 2, a message containing `expected`, and no run directory.
void expect_input_error(const Result& r, const std::string& expected, const std::string& dir) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir)) << "a run directory was left behind for: " << r.output;
}

TEST_F(TrainCommand, MissingEmptyAndTooShortCorporaAreInputErrors) {
  const std::string out = run_dir("never");
  expect_input_error(run("train -s data.path=/nonexistent/corpus.txt --run-dir " + out),
                     "/nonexistent/corpus.txt", out);
  const fs::path empty = dir_.write("empty.txt", "");
  expect_input_error(run("train -s data.path=" + empty.string() + " --run-dir " + out), "empty",
                     out);
  const fs::path tiny = dir_.write("tiny.txt", "just a few bytes of text, far too short");
  expect_input_error(
      run("train -s data.path=" + tiny.string() + " -s data.val_fraction=0 --run-dir " + out),
      "fewer than the global batch of 64", out);
}

TEST_F(TrainCommand, ConfigMistakesAreInputErrors) {
  const std::string out = run_dir("never");
  const fs::path malformed = dir_.write("bad.toml", "[batch]\nglobal_batch = = 64\n");
  expect_input_error(run("train --config " + malformed.string() + " --run-dir " + out),
                     "bad.toml:2:", out);
  const fs::path typo = dir_.write("typo.toml", "[batch]\nglobal_bach = 128\n");
  expect_input_error(run("train --config " + typo.string() + " --run-dir " + out),
                     "did you mean \"batch.global_batch\"", out);
  expect_input_error(run("train -s batch.global_batch='\"64\"' --run-dir " + out),
                     "expected an integer", out);
  expect_input_error(run("train --config /nonexistent.toml --run-dir " + out),
                     "/nonexistent.toml does not exist", out);
  expect_input_error(run("train -s optim.name=adam --run-dir " + out), "optim.name", out);
  // --steps 0 is train.steps = 0 (train.epochs decides), not the default number of steps.
  expect_input_error(run("train --steps 0 --run-dir " + out),
                     "train.steps and train.epochs are both 0", out);
  expect_input_error(run("train --steps -5 --run-dir " + out),
                     "error: --steps -5 must be >= 0 (0: train.epochs decides)", out);
}

TEST_F(TrainCommand, ImpossibleBatchSettingsAreInputErrors) {
  const std::string out = run_dir("never");
  expect_input_error(run("train " + corpus_arg() + "-s batch.micro_batch=128 --run-dir " + out),
                     "batch.micro_batch = 128 is larger than batch.global_batch = 64", out);
  expect_input_error(run("train " + corpus_arg() + "-s batch.global_batch=0 --run-dir " + out),
                     "batch.global_batch = 0", out);
  expect_input_error(run("train " + corpus_arg() + "-s batch.global_batch=-8 --run-dir " + out),
                     "batch.global_batch = -8", out);
  expect_input_error(run("train " + corpus_arg() +
                         "-s batch.micro_batch=8 -s batch.accum_steps=4 --run-dir " + out),
                     "not batch.global_batch = 64", out);
}

TEST_F(TrainCommand, AutoMicroBatchFitsTheBudgetAndKeepsTheGlobalBatch) {
  const std::string out = run_dir("auto");
  const Result r = run("train " + corpus_arg() +
                       "-s data.split_block=512 -s batch.micro_batch=auto -s memory.budget=40MiB "
                       "-s gpt.checkpointing=blocks -s sample.bytes=0 -s train.eval_samples=16 "
                       "--steps 2 --run-dir " +
                       out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("micro_batch auto"), std::string::npos) << r.output;
  for (const nlohmann::json& record : records(out, "window")) {
    EXPECT_EQ(record["samples"], 64);
    EXPECT_LT(record["micro_batch"].get<int64_t>(), 64);
    EXPECT_LE(record["peak_bytes"].get<int64_t>(), 40 << 20);
    EXPECT_GT(record["peak_bytes"].get<int64_t>(), 0);
  }
  expect_input_error(run("train -s batch.micro_batch=auto --run-dir " + run_dir("x")),
                     "needs memory.budget", run_dir("x"));
  expect_input_error(run("train -s memory.budget=lots --run-dir " + run_dir("x")), "memory.budget",
                     run_dir("x"));
  expect_input_error(run("train -s gpt.checkpointing=some --run-dir " + run_dir("x")),
                     "gpt.checkpointing", run_dir("x"));
  expect_input_error(run("train -s batch.micro_batch=big --run-dir " + run_dir("x")),
                     "an integer or \"auto\"", run_dir("x"));
}

TEST_F(TrainCommand, ABudgetTooSmallForTheStateOrForOneSampleIsAClearError) {
  // The default GPT's 3.31 MiB of parameters, as much again of gradients and twice of AdamW.
  for (const char* micro_batch : {"8", "auto"}) {
    expect_input_error(run(std::string("train -s memory.budget=5MiB -s batch.micro_batch=") +
                           micro_batch + " --run-dir " + run_dir("x")),
                       "memory.budget = 5.00 MiB cannot hold the training state: 3.31 MiB in use "
                       "at start (the model, and data held as tensors), 3.31 MiB of gradients "
                       "and 6.62 MiB of optimizer state make 13.2 MiB before any activation",
                       run_dir("x"));
  }
  // Just above the state (13.23 MiB), under what one sample needs once AdamW's moments exist
  // (from step 2 on): the evaluation and the windows retry at half their batch down to 1, then
  // a clear error.
  const Result r = run("train " + corpus_arg() +
                       "-s data.split_block=512 -s batch.micro_batch=64 -s memory.budget=13.3MiB "
                       "-s sample.bytes=0 -s train.eval_samples=64 --steps 2 --run-dir " +
                       run_dir("small"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("out of memory in the evaluation after optimizer step 0 at 64 samples a "
                          "pass; evaluating at 32"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("error: out of memory at micro-batch 1 in step 2, the smallest there "
                          "is; raise memory.budget or recompute activations"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;  // no trace
}

TEST_F(TrainCommand, TheLearningRateFollowsTheScheduleKindOncePerStep) {
  const std::string out = run_dir("linear");
  const Result r = run("train " + corpus_arg() + kTinyGpt +
                       " -s schedule.kind=warmup_linear -s schedule.warmup_steps=1 "
                       "-s schedule.min_lr_ratio=0 --steps 4 --run-dir " +
                       out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto windows = records(out, "window");
  ASSERT_EQ(windows.size(), 4u);
  const double peak = windows[0]["lr"].get<double>();
  const std::vector<double> expected = {1.0, 1.0, 2.0 / 3.0, 1.0 / 3.0};
  for (size_t i = 0; i < windows.size(); ++i)
    EXPECT_NEAR(windows[i]["lr"].get<double>(), expected[i] * peak, 1e-12 * peak) << i;
  expect_input_error(run("train -s schedule.kind=linear --run-dir " + run_dir("x")),
                     "schedule.kind", run_dir("x"));
}

TEST_F(TrainCommand, DynamicLossScalingTrainsAndReportsTheScale) {
  const std::string out = run_dir("scaled");
  const Result r = run("train " + corpus_arg() + kTinyGpt +
                       " -s loss_scale.mode=dynamic -s loss_scale.init_scale=1024 "
                       "-s loss_scale.growth_interval=2 --steps 4 --run-dir " +
                       out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loss_scale     dynamic        init 1024, x2 after 2 clean windows"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("scale 2048"), std::string::npos) << r.output;  // step 4 used 2048
  const auto windows = records(out, "window");
  ASSERT_EQ(windows.size(), 4u);
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(windows[i]["loss_scale"], 1024.0 * (1 << (i / 2))) << i;
    EXPECT_EQ(windows[i]["skipped"], false);
  }
  const auto summary = nlohmann::json::parse(testing::read_file(fs::path(out) / "summary.json"));
  EXPECT_EQ(summary["steps"], 4);
  EXPECT_EQ(summary["skipped_steps"], 0);
  EXPECT_EQ(summary["final_loss_scale"], 4096.0);
}

TEST_F(TrainCommand, OverflowingScaleSkipsWindowsVisiblyAndCanStopTheRun) {
  // 2^140 overflows float32 for certain: at least 13 windows back off before a step is taken.
  const std::string huge =
      " -s loss_scale.mode=dynamic -s loss_scale.init_scale=1.3937965749081640e42";
  const std::string out = run_dir("overflow");
  const Result r = run("train " + corpus_arg() + kTinyGpt + huge + " --steps 2 --run-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: step 1 skipped: gradient overflow at loss scale 1.39"),
            std::string::npos)
      << r.output;
  const auto summary = nlohmann::json::parse(testing::read_file(fs::path(out) / "summary.json"));
  EXPECT_EQ(summary["steps"], 2);
  const int64_t skipped = summary["skipped_steps"].get<int64_t>();
  EXPECT_GE(skipped, 13);
  EXPECT_EQ(summary["final_loss_scale"].get<double>(), std::ldexp(1.0, 140 - skipped));
  const auto windows = records(out, "window");
  ASSERT_EQ(windows.size(), static_cast<size_t>(2 + skipped));
  EXPECT_EQ(windows[0]["skipped"], true);
  EXPECT_EQ(windows[0]["skip_reason"], "nonfinite_gradient");
  EXPECT_EQ(windows[0]["step"], 1);
  EXPECT_EQ(windows.back()["skipped_steps"], skipped);

  const Result stopped =
      run("train " + corpus_arg() + kTinyGpt + huge +
          " -s train.max_consecutive_skips=2 --steps 2 --run-dir " + run_dir("stopped"));
  EXPECT_EQ(stopped.exit_code, 1) << stopped.output;
  EXPECT_NE(stopped.output.find("error: stopping at optimizer step 1: 3 windows in a row were "
                                "skipped as non-finite (more than train.max_consecutive_skips = "
                                "2)"),
            std::string::npos)
      << stopped.output;
}

TEST_F(TrainCommand, LossScaleAndNonFiniteKeysOutOfRangeAreInputErrors) {
  const std::string out = run_dir("never");
  const auto bad = [&](const std::string& assignment, const std::string& expected) {
    expect_input_error(run("train " + corpus_arg() + "-s " + assignment + " --run-dir " + out),
                       expected, out);
  };
  bad("loss_scale.mode=fp16", "loss_scale.mode");
  bad("loss_scale.growth_factor=1", "loss_scale.growth_factor = 1 must be > 1");
  bad("loss_scale.backoff_factor=1.5", "loss_scale.backoff_factor = 1.5 must be between 0 and 1");
  bad("loss_scale.backoff_factor=0", "loss_scale.backoff_factor = 0 must be between 0 and 1");
  bad("loss_scale.min_scale=0", "loss_scale.min_scale = 0 must be positive");
  bad("loss_scale.init_scale=0.5",
      "loss_scale.init_scale = 0.5 must be finite and >= "
      "loss_scale.min_scale = 1");
  bad("loss_scale.growth_interval=0", "loss_scale.growth_interval = 0 must be >= 1");
  bad("train.on_nonfinite=ignore", "train.on_nonfinite");
  bad("train.max_consecutive_skips=-1", "train.max_consecutive_skips = -1 must be >= 0");
}

TEST_F(TrainCommand, Bf16TrainsAndThePlanShowsPrecisionAndThreads) {
  const std::string out = run_dir("bf16");
  const Result r = run("train " + corpus_arg() + kTinyGpt +
                       " -s model.precision=bf16 -s model.bf16_matmul=native "
                       "-s train.concurrent_micro_batches=1 --steps 3 --run-dir " +
                       out);  // one pass at a time: every core on it
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("precision      bf16           forward passes autocast to bf16"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bf16 matmuls   native         oneDNN's bf16 kernels"), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("threads        2              OpenMP; oneDNN (convolutions, matmuls) runs"),
      std::string::npos)
      << r.output;
  // Debian's LibTorch runs fp32 matmuls on OpenBLAS's threads, the PyTorch wheel's MKL on OpenMP's.
  const bool openblas = blas_threads() > 0;
  const std::string no_openblas =
      "blas_threads   -              no OpenBLAS in this LibTorch: its BLAS runs on the OpenMP "
      "threads";
  EXPECT_NE(r.output.find(openblas ? "blas_threads   1              OpenBLAS" : no_openblas),
            std::string::npos)
      << r.output;
  const auto summary = nlohmann::json::parse(testing::read_file(fs::path(out) / "summary.json"));
  EXPECT_EQ(summary["steps"], 3);
  EXPECT_TRUE(std::isfinite(summary["last_val_loss"].get<double>()));

  const Result fp32 = run("train --plan " + corpus_arg() + kTinyGpt +
                          " -s train.threads=1 -s train.blas_threads=2 -s model.fp32_matmul=blas");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_NE(fp32.output.find("precision      fp32           no autocast"), std::string::npos)
      << fp32.output;
  EXPECT_NE(fp32.output.find("fp32 matmuls   BLAS           LibTorch's BLAS (fp32_matmul = "
                             "\"blas\")"),
            std::string::npos)
      << fp32.output;
  EXPECT_NE(fp32.output.find(openblas ? "threads        1              OpenMP (intra-op)"
                                      : "threads        1              OpenMP; LibTorch's BLAS "
                                        "(fp32 matmuls) runs over these"),
            std::string::npos)
      << fp32.output;
  EXPECT_NE(fp32.output.find(openblas ? "blas_threads   2              OpenBLAS; fp32 matmuls run "
                                        "on these"
                                      : no_openblas),
            std::string::npos)
      << fp32.output;

  // bf16 products on fp32 kernels run on the BLAS, so the automatic threads are fp32's.
  const Result fp32_kernels = run("train --plan " + corpus_arg() + kTinyGpt +
                                  " -s model.precision=bf16 -s model.bf16_matmul=fp32");
  ASSERT_EQ(fp32_kernels.exit_code, 0) << fp32_kernels.output;
  EXPECT_NE(fp32_kernels.output.find("bf16 matmuls   fp32 kernels   bf16-rounded operands"),
            std::string::npos)
      << fp32_kernels.output;
  EXPECT_NE(fp32_kernels.output.find(openblas ? "OpenBLAS; fp32 matmuls run on these"
                                              : "OpenMP; LibTorch's BLAS (fp32 matmuls) runs"),
            std::string::npos)
      << fp32_kernels.output;

  // float32 products on oneDNN: their threads are oneDNN's, on OpenMP.
  if (nn::onednn_fp32_available()) {
    const Result onednn =
        run("train --plan " + corpus_arg() + kTinyGpt + " -s model.fp32_matmul=onednn");
    ASSERT_EQ(onednn.exit_code, 0) << onednn.output;
    EXPECT_NE(onednn.output.find("fp32 matmuls   oneDNN         oneDNN's float32 kernels"),
              std::string::npos)
        << onednn.output;
    EXPECT_NE(onednn.output.find("OpenMP; oneDNN (convolutions, matmuls) runs over these"),
              std::string::npos)
        << onednn.output;
  }
}

TEST_F(TrainCommand, ConcurrentMicroBatchesTrainTheSameAndShowInThePlan) {
  // At one OpenMP and one OpenBLAS thread each pass's kernels compute the same on any thread, so
  // 2 micro-batches at a time give bitwise the losses of one at a time.
  const std::string one = run_dir("one_at_a_time");
  const std::string two = run_dir("two_at_a_time");
  const std::string common =
      "train " + corpus_arg() + kTinyGpt + " -s train.threads=1 -s train.blas_threads=1 --steps 3";
  const Result r1 = run(common + " --run-dir " + one);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const Result r2 = run(common + " -s train.concurrent_micro_batches=2 --run-dir " + two);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("concurrent     2              micro-batches of a window run at once"),
            std::string::npos)
      << r2.output;
  const auto summary_of = [](const std::string& dir) {
    return nlohmann::json::parse(testing::read_file(fs::path(dir) / "summary.json"));
  };
  const auto s1 = summary_of(one);
  const auto s2 = summary_of(two);
  EXPECT_EQ(s2["steps"], 3);
  EXPECT_EQ(s2["last_train_loss"].get<double>(), s1["last_train_loss"].get<double>());
  EXPECT_EQ(s2["last_val_loss"].get<double>(), s1["last_val_loss"].get<double>());

  // Automatic threads give each of the passes its share of the cores.
  const Result plan =
      run("train --plan " + corpus_arg() + kTinyGpt + " -s train.concurrent_micro_batches=" +
          std::to_string(2 * available_cores()) + " -s model.fp32_matmul=blas");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const bool openblas = blas_threads() > 0;  // Debian's LibTorch; the wheel's MKL has none
  EXPECT_NE(plan.output.find(openblas ? "threads        1              OpenMP (intra-op)"
                                      : "threads        1              OpenMP; LibTorch's BLAS"),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find(openblas ? "blas_threads   1              OpenBLAS"
                                      : "blas_threads   -              no OpenBLAS"),
            std::string::npos)
      << plan.output;

  // auto, the default, takes 2 passes wherever the process has 2 cores or more, and says why.
  const Result by_default = run("train --plan " + corpus_arg() + kTinyGpt);
  ASSERT_EQ(by_default.exit_code, 0) << by_default.output;
  EXPECT_NE(by_default.output.find(
                available_cores() >= 2
                    ? "concurrent     2              auto: 2 at once"
                    : "concurrent     1              auto: one at a time: 1 core per process"),
            std::string::npos)
      << by_default.output;
}

TEST_F(TrainCommand, PrecisionMistakesAreInputErrors) {
  const std::string out = run_dir("never");
  const auto bad = [&](const std::string& assignments, const std::string& expected) {
    expect_input_error(run("train " + corpus_arg() + assignments + " --run-dir " + out), expected,
                       out);
  };
  bad("-s model.precision=fp8", "model.precision");
  bad("-s train.device=cpu -s model.precision=fp16",
      "model.precision = \"fp16\" needs a CUDA build");
  bad("-s model.bf16_matmul=onednn", "model.bf16_matmul");
  bad("-s model.fp32_matmul=mkl", "model.fp32_matmul = \"mkl\" is not allowed");
  if (!nn::onednn_fp32_available())
    bad("-s model.fp32_matmul=onednn", "model.fp32_matmul = \"onednn\" needs LibTorch 2.x");
  bad("-s model.precision=bf16 -s model.dtype=float64",
      "model.precision = \"bf16\" autocasts float32 weights");
  bad("-s train.blas_threads=-1", "train.blas_threads = -1 must be >= 0");
}

TEST_F(TrainCommand, DevicesThatCannotBeUsedAreInputErrors) {
  const std::string out = run_dir("never");
  const auto bad = [&](const std::string& device, const std::string& expected) {
    expect_input_error(
        run("train " + corpus_arg() + "-s train.device=" + device + " --run-dir " + out), expected,
        out);
  };
  bad("gpu", "train.device = \"gpu\" is not a device; expected \"auto\", \"cpu\"");
  const CudaAvailability cuda = cuda_availability();
  if (!cuda.built_with_cuda)
    bad("cuda", "train.device = \"cuda\": this LibTorch has no CUDA");
  else if (cuda.device_count == 0)
    bad("cuda:0", "train.device = \"cuda:0\": no GPU is visible to this process");
  bad("cuda:99", cuda.device_count > 0  ? "the index is out of range"
                 : cuda.built_with_cuda ? "no GPU is visible"
                                        : "this LibTorch has no CUDA");
  // The plan names the device: here the CPU unless a GPU is there.
  const Result plan = run("train --plan " + corpus_arg() + kTinyGpt);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find(cuda.device_count > 0 ? "cuda:0 (" : "cpu  "), std::string::npos)
      << plan.output;
}

TEST_F(TrainCommand, KernelChoicesShowInThePlanAndMistakesAreInputErrors) {
  const Result plan = run("train --plan " + corpus_arg() + kTinyGpt +
                          " -s model.attention=composite -s optim.kernel=per_tensor");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("attention      composite      masked product, softmax, product "
                             "over "),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("weight decay 0.1, per_tensor kernel"), std::string::npos)
      << plan.output;
  // The blocks row: fused by default at this size, composite where dropout draws or when asked.
  const auto blocks_row = [&](const std::string& assignments) {
    const Result r = run("train --plan " + corpus_arg() + kTinyGpt + assignments);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t row = r.output.find("\nblocks ");
    return row == std::string::npos ? std::string() : r.output.substr(row + 1, 110);
  };
  EXPECT_NE(blocks_row("").find("fused          one autograd node per block"), std::string::npos);
  EXPECT_NE(blocks_row(" -s gpt.dropout=0.1").find("composite      dropout draws"),
            std::string::npos);
  EXPECT_NE(blocks_row(" -s model.block_kernel=composite").find("one operation per step"),
            std::string::npos);
  const std::string out = run_dir("never");
  const auto bad = [&](const std::string& assignments, const std::string& expected) {
    expect_input_error(run("train " + corpus_arg() + kTinyGpt + assignments + " --run-dir " + out),
                       expected, out);
  };
  bad(" -s model.attention=flash", "model.attention");
  bad(" -s optim.kernel=foreach", "optim.kernel");
  bad(" -s model.block_kernel=fast", "model.block_kernel");
  if (!nn::fused_attention_available())
    bad(" -s model.attention=fused", "model.attention = \"fused\" needs LibTorch 2.0 or later");
  if (!compat::kHasFusedAdamW)
    bad(" -s optim.kernel=fused", "optim.kernel = fused needs LibTorch 2.4 or later");
}

TEST_F(TrainCommand, BenchPrecisionPrintsTheWindowGradientErrors) {
  const Result r = run("bench precision " + corpus_arg() + kTinyGpt + " --accum-steps 1,4,16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("accum_steps  micro_batch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n16 "), std::string::npos) << r.output;  // accum_steps 16 has a row
  EXPECT_NE(r.output.find("e-0"), std::string::npos) << r.output;    // errors in scientific form
  EXPECT_EQ(run("bench precision " + corpus_arg() + kTinyGpt + " --accum-steps 3").exit_code, 2);
}

TEST_F(TrainCommand, RefusesToOverwriteAnotherRun) {
  const fs::path taken = dir_.path() / "taken";
  fs::create_directories(taken);
  dir_.write("taken/summary.json", "{\"finished\": true}");
  const Result r = run("train " + corpus_arg() + "--run-dir " + taken.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already holds files"), std::string::npos) << r.output;
  EXPECT_EQ(testing::read_file(taken / "summary.json"), "{\"finished\": true}");
}

TEST(Cli, HelpAndUsage) {
  const Result help = run("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("train"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("config"), std::string::npos) << help.output;
  const Result train_help = run("train --help");
  EXPECT_EQ(train_help.exit_code, 0);
  EXPECT_NE(train_help.output.find("--set"), std::string::npos) << train_help.output;
  EXPECT_EQ(run("").exit_code, 2);
  EXPECT_EQ(run("fly").exit_code, 2);
  EXPECT_EQ(run("train --no-such-flag").exit_code, 2);
  const Result config = run("config");
  EXPECT_EQ(config.exit_code, 0);
  EXPECT_NE(config.output.find("global_batch = 64"), std::string::npos) << config.output;
}

TEST(Cli, ShippedConfigIsTheDefaultJob) {
  const Result defaults = run("config");
  const Result shipped = run(std::string("config --config ") + BIGBATCH_TEST_DATA_DIR +
                             "/../configs/gpt-fortunes.toml");
  ASSERT_EQ(shipped.exit_code, 0) << shipped.output;
  EXPECT_EQ(shipped.output, defaults.output);
}

}  // namespace
}  // namespace bigbatch
