// job/concurrency_choice: train.concurrent_micro_batches = "auto" takes 2 passes at once only
// where they are allowed and pay (CPU, a model without BatchNorm writes or dropout draws, two or
// more micro-batches per window, a small pass, no memory budget, automatic threads, 2+ cores), 1
// otherwise, and says why either way.
#include "bigbatch/job/concurrency_choice.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "bigbatch/core/system_info.h"

namespace bigbatch {
namespace {

/// A workload of a 4 x 4 linear layer (20 parameters): every pass is small.
job::Workload small_workload() {
  job::Workload w;
  w.module = torch::nn::Linear(4, 4).ptr();
  return w;
}

engine::Plan plan_of(int64_t global_batch, int64_t micro_batch) {
  return engine::resolve_plan(
      engine::BatchOptions().global_batch(global_batch).micro_batch(micro_batch));
}

TEST(ConcurrencyChoice, TwoPassesOnTwoOrMoreCoresWhenNothingStandsInTheWay) {
  const job::TrainingJobOptions options;
  const job::Workload w = small_workload();
  const job::ConcurrencyChoice two =
      job::choose_concurrent_micro_batches(options, w, plan_of(64, 8), 2);
  EXPECT_EQ(two.passes, 2);
  EXPECT_EQ(two.why,
            "auto: 2 at once, 1 of 2 cores each; their activations exist at once (1 keeps "
            "one pass's)");
  const job::ConcurrencyChoice sixteen =
      job::choose_concurrent_micro_batches(options, w, plan_of(64, 2), 16);
  EXPECT_EQ(sixteen.passes, 2);
  EXPECT_NE(sixteen.why.find("8 of 16 cores each"), std::string::npos) << sixteen.why;
  // A pass of 6 x 1,001,000 parameters x 2 x 1,024 tokens = 12.3 GFLOP, at most 20: two at once.
  job::Workload medium = small_workload();
  medium.module = torch::nn::Linear(1000, 1000).ptr();
  medium.attention_keys = 1024;
  EXPECT_LE(job::pass_flops(medium, 2), job::kMostFlopsForConcurrentPasses);
  EXPECT_EQ(job::choose_concurrent_micro_batches(options, medium, plan_of(64, 2), 2).passes, 2);
}

TEST(ConcurrencyChoice, NativeBf16RunsTwoPassesUpToTwiceTheSize) {
  using nn::Precision;
  const std::set<std::string> avx512_bf16 = {"avx2", "avx512f", "avx512_bf16"};
  const std::set<std::string> amx = {"avx2", "avx512f", "amx_bf16"};
  const std::set<std::string> avx2 = {"avx2", "fma"};
  EXPECT_EQ(job::most_flops_for_concurrent_passes(Precision::kFp32, avx512_bf16), 20e9);
  EXPECT_EQ(job::most_flops_for_concurrent_passes(Precision::kBf16, avx512_bf16), 40e9);
  EXPECT_EQ(job::most_flops_for_concurrent_passes(Precision::kBf16, amx), 40e9);
  EXPECT_EQ(job::most_flops_for_concurrent_passes(Precision::kBf16, avx2), 20e9);
  // 6 x 1,001,000 parameters x 4 x 1,024 tokens = 24.6 GFLOP: one at a time in fp32; in bf16 two
  // at once where this CPU has native bf16.
  job::Workload w;
  w.module = torch::nn::Linear(1000, 1000).ptr();
  w.attention_keys = 1024;
  job::TrainingJobOptions options;
  EXPECT_EQ(job::choose_concurrent_micro_batches(options, w, plan_of(64, 4), 2).passes, 1);
  options.precision = Precision::kBf16;
  const job::ConcurrencyChoice bf16 =
      job::choose_concurrent_micro_batches(options, w, plan_of(64, 4), 2);
  const bool native = job::most_flops_for_concurrent_passes(Precision::kBf16, this_cpu_flags()) >
                      job::kMostFlopsForConcurrentPasses;
  EXPECT_EQ(bf16.passes, native ? 2 : 1) << bf16.why;
  if (!native) {
    EXPECT_NE(bf16.why.find("over the 20 of two at once in bf16"), std::string::npos) << bf16.why;
  }
}

TEST(ConcurrencyChoice, EachReasonForOneAtATimeIsNamed) {
  const job::Workload free_model = small_workload();
  const engine::Plan eight_by_eight = plan_of(64, 8);
  const auto choice = [&](const job::TrainingJobOptions& options, const job::Workload& w,
                          const engine::Plan& plan, int64_t cores) {
    const job::ConcurrencyChoice c = job::choose_concurrent_micro_batches(options, w, plan, cores);
    EXPECT_EQ(c.passes, 1) << c.why;
    return c.why;
  };
  job::TrainingJobOptions options;
  EXPECT_EQ(choice(options, free_model, eight_by_eight, 1),
            "auto: one at a time: 1 core per process");
  EXPECT_EQ(choice(options, free_model, plan_of(64, 64), 2), "auto: one micro-batch per window");

  job::Workload dropout = small_workload();
  dropout.concurrency_need = "gpt.dropout = 0, got 0.1";
  EXPECT_EQ(choice(options, dropout, eight_by_eight, 2),
            "auto: one at a time; passes at once need gpt.dropout = 0, got 0.1");

  // 1,001,000 parameters x 8 micro-batch x 1,024 tokens x 6 = 49.2 GFLOP per pass.
  job::Workload large;
  large.module = torch::nn::Linear(1000, 1000).ptr();
  large.attention_keys = 1024;
  EXPECT_DOUBLE_EQ(job::pass_flops(large, 8), 6.0 * 1001000 * 8 * 1024);
  EXPECT_EQ(choice(options, large, eight_by_eight, 2),
            "auto: one at a time: a pass is large (about 49 GFLOP as 6 x parameters x rows "
            "estimates it, over the 20 of two at once in fp32), a second one at once would add "
            "its activations for little");
  EXPECT_DOUBLE_EQ(job::pass_flops(free_model, 8), 6.0 * 20 * 8);  // no attention: 8 rows
  // Embedding tables read by index cost no FLOPs: 1,000,000 of them leave 1,000 parameters.
  large.lookup_parameters = 1000000;
  EXPECT_DOUBLE_EQ(job::pass_flops(large, 8), 6.0 * 1000 * 8 * 1024);
  EXPECT_EQ(job::choose_concurrent_micro_batches(options, large, eight_by_eight, 2).passes, 2);
  job::Workload images = small_workload();
  images.positions_per_sample = 28 * 28;  // pixels count as rows, before attention_keys
  images.attention_keys = 5;
  EXPECT_DOUBLE_EQ(job::pass_flops(images, 8), 6.0 * 20 * 8 * 784);

  job::TrainingJobOptions budget;
  budget.memory_budget = int64_t{1} << 30;
  EXPECT_NE(choice(budget, free_model, eight_by_eight, 2).find("under memory.budget"),
            std::string::npos);

  job::TrainingJobOptions threads;
  threads.threads.openmp(2);
  EXPECT_NE(choice(threads, free_model, eight_by_eight, 2).find("threads are set by hand"),
            std::string::npos);
  job::TrainingJobOptions blas;
  blas.threads.blas(1);
  EXPECT_NE(choice(blas, free_model, eight_by_eight, 2).find("threads are set by hand"),
            std::string::npos);

  job::TrainingJobOptions gpu;
  gpu.device = c10::Device(c10::kCUDA, 0);
  EXPECT_EQ(choice(gpu, free_model, eight_by_eight, 2),
            "auto: one at a time on cuda:0 (concurrent passes share CPU cores)");
}

}  // namespace
}  // namespace bigbatch
