// Running the real `bigbatch` binary from tests: exit code and output, and a small corpus.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

namespace bigbatch {

/// What a run of the binary gave.
struct Result {
  int exit_code = -1;
  std::string output;  ///< stdout and stderr together
};

/// Runs `command` through the shell, its stderr joined to its stdout.
inline Result run_shell(const std::string& shell_command) {
  const std::string command = shell_command + " 2>&1";
  Result result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr)
    return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Runs `bigbatch ARGUMENTS` (the binary under test, BIGBATCH_CLI_PATH) through the shell.
inline Result run(const std::string& arguments) {
  return run_shell(std::string(BIGBATCH_CLI_PATH) + " " + arguments);
}

/// Why the build's Python (BIGBATCH_TEST_PYTHON) cannot run the tests' Python side, for
/// GTEST_SKIP: it is missing, or it cannot import torch. Empty when it can.
inline std::string test_python_unusable() {
  const std::string python = BIGBATCH_TEST_PYTHON;
  if (::access(python.c_str(), X_OK) != 0)
    return python + " is missing (run scripts/setup, or set -DBIGBATCH_PYTHON)";
  if (run_shell(python + " -c 'import torch'").exit_code != 0)
    return python + " cannot import torch (run scripts/setup, or set -DBIGBATCH_PYTHON)";
  return "";
}

/// Settings of a tiny GPT that trains a step in well under a second on the small corpus: global
/// batch 16 as 2 x 8, an evaluation every 2 steps, a checkpoint every 2, no text sample, one
/// thread each.
inline const char* tiny_gpt_settings() {
  return "-s gpt.layers=1 -s gpt.embed=16 -s gpt.heads=2 -s gpt.context=16 "
         "-s batch.global_batch=16 -s batch.micro_batch=8 -s data.split_block=512 "
         "-s train.eval_every=2 -s train.eval_samples=32 -s sample.bytes=0 -s train.threads=1 "
         "-s train.blas_threads=1 -s checkpoint.every=2";
}

/// About 40 KB of varied English text.
inline std::string small_corpus() {
  const char* words[] = {"the",   "quick", "brown", "fox",  "jumps", "over", "a",   "lazy", "dog",
                         "while", "seven", "wise",  "owls", "watch", "from", "old", "trees"};
  std::ostringstream text;
  uint64_t state = 12345;
  for (int i = 0; i < 7000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    text << words[(state >> 33) % 17] << ((state >> 20) % 9 == 0 ? ".\n" : " ");
  }
  return text.str();
}

/// Debian's Fashion-MNIST training images (dataset-fashion-mnist).
inline const char* kFashionMnist = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

/// A ResNet-8 of width 8 on 512 training images, global batch 64 as 4 x 16, 6 steps, evaluated
/// before and after on the first 256 test images. One thread: ctest runs tests side by side, and
/// OpenMP teams slow down many times over on cores that are busy.
inline const char* kSmallResnet =
    "train -s model.kind=resnet -s resnet.width=8 -s data.subsample=512 -s batch.global_batch=64 "
    "-s batch.micro_batch=16 -s train.steps=6 -s train.eval_every=6 -s train.eval_samples=256 "
    "-s optim.name=sgd -s optim.lr=0.05 -s schedule.warmup_steps=2 -s train.threads=1 ";

}  // namespace bigbatch
