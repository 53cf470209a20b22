// Whole training runs on 2 and 4 ranks (threads over Gloo) against one process with the same
// global batch: the same weights in float64, the communication per step, agreed restarts, resume.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "bigbatch/data/context_dataset.h"
#include "bigbatch/data/sequence_dataset.h"
#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/gpt.h"
#include "bigbatch/models/mlp.h"
#include "dist/rank_threads.h"
#include "engine/training_helpers.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using testing::OutOfMemoryOnce;
using testing::random_bytes;
using testing::RecordingSink;

/// What a job is asked to do.
struct JobSpec {
  int64_t world_size = 1;
  int64_t micro_batch = 64;  ///< per rank
  int64_t global_batch = 64;
  int64_t steps = 20;
  bool gpt = false;  ///< a token loss (with a padded last sequence) instead of the MLP
  int64_t dataset_bytes = 600;
  int64_t out_of_memory_rank = -1;  ///< this rank's forward call `out_of_memory_call` fails
  int64_t out_of_memory_call = 0;
  int64_t checkpoint_every = 0;  ///< rank 0 saves to `checkpoint_dir`
  std::string checkpoint_dir;
  std::string resume_from;  ///< a checkpoint file every rank loads first
  int64_t concurrent_micro_batches = 1;
};

/// One rank's parts, built on the main thread (the ranks are threads sharing one random
/// generator, so models are made one after the other from the same seed).
struct Rank {
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<engine::CrossEntropyObjective> plain;
  std::unique_ptr<OutOfMemoryOnce> objective;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<engine::LrSchedule> schedule;
  engine::Plan plan;
  RecordingSink sink;
  engine::TrainSummary summary;
  dist::CommStats stats;
  torch::Tensor weights;  // all parameters, flattened
};

struct JobResult {
  std::vector<std::unique_ptr<Rank>> ranks;
  const Rank& first() const { return *ranks.front(); }
};

std::unique_ptr<Rank> make_rank(const JobSpec& spec, int64_t rank) {
  auto r = std::make_unique<Rank>();
  torch::manual_seed(5);
  if (spec.gpt) {
    models::Gpt gpt(models::GptOptions().context(16).layers(2).heads(2).embed(16).dropout(0.0));
    r->module = gpt.ptr();
    r->plain = std::make_unique<engine::CrossEntropyObjective>(engine::forward_of(gpt),
                                                               engine::LossUnit::kToken);
  } else {
    models::Mlp mlp(models::MlpOptions().context(4).embed(8).hidden(32));
    r->module = mlp.ptr();
    r->plain = std::make_unique<engine::CrossEntropyObjective>(engine::forward_of(mlp),
                                                               engine::LossUnit::kSample);
  }
  r->module->to(torch::kFloat64);
  r->objective = std::make_unique<OutOfMemoryOnce>(
      *r->plain, rank == spec.out_of_memory_rank ? spec.out_of_memory_call : 0);
  r->plan = engine::resolve_plan(engine::BatchOptions()
                                     .global_batch(spec.global_batch)
                                     .micro_batch(spec.micro_batch)
                                     .world_size(spec.world_size)
                                     .base_lr(3e-3));
  r->optimizer = engine::make_optimizer(
      *r->module, engine::OptimizerOptions().weight_decay(0.1).beta2(0.99).lr(r->plan.lr));
  r->schedule = std::make_unique<engine::LrSchedule>(
      engine::LrScheduleOptions().peak_lr(r->plan.lr).warmup_steps(5).total_steps(spec.steps));
  return r;
}

/// Trains rank `r` of the job (communicator null for a single process).
void train_rank(const JobSpec& spec, Rank& r, const data::Dataset& dataset,
                dist::Communicator* communicator) {
  engine::TrainingSetup setup =
      testing::setup_of(*r.module, *r.objective, *r.optimizer, *r.schedule, r.plan, dataset);
  setup.communicator = communicator;
  const int64_t rank = communicator != nullptr ? communicator->rank() : 0;
  engine::CheckpointParts parts{r.module.get(), r.optimizer.get(), nullptr, &r.plan};
  parts.rank = rank;
  std::unique_ptr<engine::Checkpointer> checkpointer;
  if (!spec.checkpoint_dir.empty() && rank == 0) {
    checkpointer = std::make_unique<engine::Checkpointer>(
        parts, engine::CheckpointOptions().directory(spec.checkpoint_dir).keep(10));
    setup.checkpoints = checkpointer.get();
  }
  engine::Trainer trainer(setup, engine::TrainerOptions()
                                     .total_steps(spec.steps)
                                     .max_grad_norm(0.5)
                                     .seed(9)
                                     .checkpoint_every(spec.checkpoint_every)
                                     .bucket_bytes(2048)
                                     .concurrent_micro_batches(spec.concurrent_micro_batches));
  if (!spec.resume_from.empty())
    trainer.resume(engine::load_checkpoint(spec.resume_from, parts).state);
  trainer.add_sink(&r.sink);
  r.summary = trainer.fit();
  if (communicator != nullptr)
    r.stats = communicator->stats();
  r.weights = testing::flat_parameters(*r.module);
}

JobResult run_job(const JobSpec& spec) {
  std::unique_ptr<data::Dataset> dataset;
  if (spec.gpt) {
    dataset = std::make_unique<data::SequenceDataset>(random_bytes(spec.dataset_bytes, 4),
                                                      data::SequenceDatasetOptions(16));
  } else {
    dataset = std::make_unique<data::ContextDataset>(random_bytes(spec.dataset_bytes, 3),
                                                     data::ContextDatasetOptions(4));
  }
  JobResult job;
  for (int64_t rank = 0; rank < spec.world_size; ++rank)
    job.ranks.push_back(make_rank(spec, rank));
  if (spec.world_size == 1) {
    train_rank(spec, *job.ranks[0], *dataset, nullptr);
    return job;
  }
  testing::run_ranks(spec.world_size, [&](dist::Communicator& communicator) {
    train_rank(spec, *job.ranks[communicator.rank()], *dataset, &communicator);
  });
  return job;
}

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

TEST(DataParallelTraining, TwoAndFourRanksEqualOneProcessInFloat64) {
  JobSpec single;
  single.micro_batch = 8;
  const JobResult one = run_job(single);
  JobSpec two = single;
  two.world_size = 2;
  two.micro_batch = 12;  // 32 per rank as 12 + 12 + 8; the short last window (20) as 10 / 10
  const JobResult pair = run_job(two);
  JobSpec four = single;
  four.world_size = 4;
  four.micro_batch = 16;  // one micro-batch per rank; the short last window as 5 each
  const JobResult quad = run_job(four);

  ASSERT_EQ(one.first().sink.windows.size(), 20u);
  EXPECT_EQ(one.first().sink.windows[9].samples, 596 - 9 * 64);
  EXPECT_EQ(pair.first().sink.windows[9].samples, 596 - 9 * 64);  // counts are the job's
  EXPECT_EQ(pair.first().sink.windows[0].micro_batches, 3);       // and micro-batches the rank's
  EXPECT_LE(max_relative_difference(pair.first().weights, one.first().weights), 1e-9);
  EXPECT_LE(max_relative_difference(quad.first().weights, one.first().weights), 1e-9);
  for (size_t i = 0; i < one.first().sink.windows.size(); ++i) {
    EXPECT_NEAR(pair.first().sink.windows[i].loss, one.first().sink.windows[i].loss, 1e-12);
    EXPECT_NEAR(quad.first().sink.windows[i].loss, one.first().sink.windows[i].loss, 1e-12);
    EXPECT_NEAR(quad.first().sink.windows[i].grad_norm, one.first().sink.windows[i].grad_norm,
                1e-9);
  }
  // Every rank holds the same bits: the same summed gradient, the same decisions.
  for (const JobResult* job : {&pair, &quad}) {
    for (const auto& rank : job->ranks)
      EXPECT_TRUE(torch::equal(rank->weights, job->first().weights));
  }
  EXPECT_GT(max_relative_difference(testing::flat_parameters(*make_rank(single, 0)->module),
                                    one.first().weights),
            1e-3)
      << "training must move the weights";
}

TEST(DataParallelTraining, TokenLossWithUnevenPaddingEqualsOneProcess) {
  // 3000 bytes as 188 sequences of 16, the last one padded: windows of 16 and a last one of 12;
  // the ranks' token counts differ, and the loss is still the mean over the job's tokens.
  JobSpec single;
  single.gpt = true;
  single.dataset_bytes = 3000;
  single.global_batch = 16;
  single.micro_batch = 4;
  single.steps = 14;
  const JobResult one = run_job(single);
  JobSpec two = single;
  two.world_size = 2;
  two.micro_batch = 3;
  const JobResult pair = run_job(two);
  EXPECT_LE(max_relative_difference(pair.first().weights, one.first().weights), 1e-9);
  EXPECT_EQ(pair.first().sink.windows[11].samples, 188 - 11 * 16);
  bool padded = false;  // some window of the first epoch holds the padded sequence
  for (size_t i = 0; i < 12; ++i) {
    const metrics::WindowRecord& window = pair.first().sink.windows[i];
    EXPECT_EQ(window.tokens, one.first().sink.windows[i].tokens);
    padded = padded || window.tokens < window.samples * 16;
  }
  EXPECT_TRUE(padded);
}

TEST(DataParallelTraining, ConcurrentMicroBatchesOnEveryRankTrainTheSame) {
  // 8 samples per rank and window as 2 + 2 + 2 + 2 (a helper runs the last pass: its gradients
  // are reduced at the boundary) or 3 + 3 + 2 (the training thread runs the last pass: its
  // backward starts the buckets).
  for (const int64_t micro_batch : {2, 3}) {
    SCOPED_TRACE("micro-batch " + std::to_string(micro_batch));
    JobSpec two;
    two.gpt = true;
    two.dataset_bytes = 3000;
    two.global_batch = 16;
    two.micro_batch = micro_batch;
    two.steps = 6;
    two.world_size = 2;
    const JobResult one_at_a_time = run_job(two);
    two.concurrent_micro_batches = 2;
    const JobResult concurrent = run_job(two);
    EXPECT_LE(max_relative_difference(concurrent.first().weights, one_at_a_time.first().weights),
              1e-12);
    for (const auto& rank : concurrent.ranks)
      EXPECT_TRUE(torch::equal(rank->weights, concurrent.first().weights));
    ASSERT_EQ(concurrent.first().sink.windows.size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_NEAR(concurrent.first().sink.windows[i].loss,
                  one_at_a_time.first().sink.windows[i].loss, 1e-12);
    }
  }
}

TEST(DataParallelTraining, ARankWithAnEmptyShardTakesPartInTheWindow) {
  // 64 x 9 + 1 samples: the last window of each epoch has one sample, and rank 1 none of it.
  JobSpec single;
  single.dataset_bytes = 64 * 9 + 1 + 4;
  single.micro_batch = 16;
  single.steps = 12;
  const JobResult one = run_job(single);
  ASSERT_EQ(one.first().sink.windows[9].samples, 1);
  JobSpec two = single;
  two.world_size = 2;
  const JobResult pair = run_job(two);
  EXPECT_EQ(pair.ranks[1]->sink.windows[9].micro_batches, 0);
  EXPECT_EQ(pair.first().sink.windows[9].micro_batches, 1);
  EXPECT_LE(max_relative_difference(pair.first().weights, one.first().weights), 1e-9);
}

TEST(DataParallelTraining, OneGradientOfTrafficPerOptimizerStepWhateverTheAccumulation) {
  std::vector<int64_t> gradient_bytes;
  for (const int64_t accum_steps : {1, 4, 16}) {
    JobSpec spec;
    spec.world_size = 2;
    spec.micro_batch = 32 / accum_steps;
    spec.steps = 3;
    const JobResult job = run_job(spec);
    const Rank& rank = job.first();
    int64_t parameters = 0;
    int64_t gradient_values = 0;
    for (const auto& p : rank.module->parameters()) {
      ++parameters;
      gradient_values += p.numel();
    }
    ASSERT_EQ(rank.sink.windows.size(), 3u);
    for (const metrics::WindowRecord& window : rank.sink.windows) {
      EXPECT_EQ(window.micro_batches, accum_steps);
      // The gradient plus one definedness flag per parameter, in float64.
      EXPECT_EQ(window.gradient_bytes, (gradient_values + parameters) * 8);
      gradient_bytes.push_back(window.gradient_bytes);
      // Buckets of 2 KiB, plus the window's counts and its agreement: nothing per micro-batch.
      EXPECT_EQ(window.comm_calls, rank.stats.gradients.calls / 3 + 2) << accum_steps;
      EXPECT_GT(window.comm_seconds, 0.0);
    }
    EXPECT_GT(rank.stats.gradients.calls / 3, 1) << "the test needs several buckets";
    EXPECT_EQ(rank.stats.gradients.bytes, 3 * rank.sink.windows[0].gradient_bytes);
  }
  for (const int64_t bytes : gradient_bytes)
    EXPECT_EQ(bytes, gradient_bytes.front());
}

TEST(DataParallelTraining, OutOfMemoryOnOneRankRestartsTheWindowOnEvery) {
  // Rank 1, micro-batches of 8 (4 per window): call 10 is its second micro-batch of step 3.
  JobSpec spec;
  spec.world_size = 2;
  spec.micro_batch = 8;
  spec.out_of_memory_rank = 1;
  spec.out_of_memory_call = 10;
  const JobResult recovered = run_job(spec);
  JobSpec small = spec;
  small.micro_batch = 4;
  small.out_of_memory_rank = -1;
  const JobResult reference = run_job(small);
  for (const auto& rank : recovered.ranks) {
    ASSERT_EQ(rank->sink.notices.size(), 1u);
    EXPECT_NE(rank->sink.notices[0].find("out of memory on rank 1 at micro-batch 8 in step 3"),
              std::string::npos)
        << rank->sink.notices[0];
    EXPECT_EQ(rank->summary.final_micro_batch, 4);
    EXPECT_EQ(rank->sink.windows[2].micro_batch, 4);
    EXPECT_TRUE(torch::equal(rank->weights, recovered.first().weights));
  }
  EXPECT_LE(max_relative_difference(recovered.first().weights, reference.first().weights), 1e-9);
}

TEST(DataParallelTraining, ResumingATwoRankCheckpointEndsAtTheSameWeights) {
  const testing::TempDir dir;
  JobSpec spec;
  spec.world_size = 2;
  spec.micro_batch = 8;
  spec.checkpoint_every = 5;
  spec.checkpoint_dir = (dir.path() / "checkpoints").string();
  const JobResult whole = run_job(spec);
  JobSpec resumed = spec;
  resumed.checkpoint_dir.clear();
  resumed.resume_from = (dir.path() / "checkpoints" / "step-00000010.ckpt").string();
  const JobResult second_half = run_job(resumed);
  EXPECT_TRUE(torch::equal(second_half.first().weights, whole.first().weights));
  EXPECT_TRUE(torch::equal(second_half.ranks[1]->weights, whole.first().weights));
  ASSERT_EQ(second_half.first().sink.windows.size(), 10u);
  EXPECT_EQ(second_half.first().sink.windows[0].step, 11);

  // A single process cannot take it over: the world size is part of the checkpoint.
  JobSpec alone = resumed;
  alone.world_size = 1;
  const std::string message = testing::input_error_of([&] { run_job(alone); });
  EXPECT_NE(message.find("was saved by 2 process(es); this run has 1"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace bigbatch
