#include "bigbatch/data/prefetcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/data/sequence_dataset.h"

namespace bigbatch::data {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

/// A dataset of `n` samples whose get() counts its calls, can sleep, and throws for index -7 (an
/// InputError) so that tests can see what runs on the worker.
class ProbeDataset : public Dataset {
 public:
  explicit ProbeDataset(int64_t n, std::chrono::milliseconds delay = {}) : n_(n), delay_(delay) {}
  int64_t size() const override { return n_; }
  Batch get(const std::vector<int64_t>& indices) const override {
    ++started;
    std::this_thread::sleep_for(delay_);
    grad_mode_on = torch::GradMode::is_enabled();
    for (const int64_t i : indices) {
      if (i == -7) {
        ++finished;
        throw InputError("probe: index -7 is poisoned");
      }
    }
    torch::Tensor inputs = torch::tensor(indices, torch::kLong).mul(10);  // (B)
    ++finished;
    return {inputs, inputs + 1};
  }
  std::string describe() const override { return "probe"; }

  mutable std::atomic<int> started{0};
  mutable std::atomic<int> finished{0};
  mutable std::atomic<bool> grad_mode_on{true};

 private:
  int64_t n_;
  std::chrono::milliseconds delay_;
};

/// Waits up to 5 s for `condition`.
template <typename Condition>
bool eventually(Condition condition) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!condition()) {
    if (Clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void expect_same(const Batch& got, const Batch& expected, int step) {
  ASSERT_TRUE(got.inputs.defined()) << step;
  EXPECT_EQ(got.inputs.sizes(), expected.inputs.sizes()) << step;
  EXPECT_EQ(got.inputs.scalar_type(), expected.inputs.scalar_type()) << step;
  EXPECT_TRUE(torch::equal(got.inputs, expected.inputs)) << step;  // bitwise for these dtypes
  EXPECT_TRUE(torch::equal(got.targets, expected.targets)) << step;
}

/// Random requests and next() calls interleaved at random, checked bitwise against
/// dataset.get in request order.
void check_against_synchronous(const Dataset& dataset, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto depth = static_cast<int64_t>(rng() % 6);  // 0 (synchronous) .. 5
  Prefetcher prefetcher(dataset, depth);
  EXPECT_EQ(prefetcher.depth(), depth);
  std::vector<std::vector<int64_t>> requested;
  size_t returned = 0;
  for (int step = 0; step < 60; ++step) {
    const bool can_take = returned < requested.size();
    if (!can_take || rng() % 3 != 0) {
      std::vector<int64_t> indices(1 + rng() % 9);
      for (int64_t& i : indices)
        i = static_cast<int64_t>(rng() % static_cast<uint64_t>(dataset.size()));
      prefetcher.request(indices);
      requested.push_back(indices);
    } else {
      expect_same(prefetcher.next(), dataset.get(requested[returned]), step);
      ++returned;
    }
    EXPECT_EQ(prefetcher.pending(), static_cast<int64_t>(requested.size() - returned));
  }
  for (; returned < requested.size(); ++returned)
    expect_same(prefetcher.next(), dataset.get(requested[returned]), -1);
  EXPECT_EQ(prefetcher.pending(), 0);
}

TEST(Prefetcher, BatchesEqualSynchronousGetsBitwise) {
  // Float images (scaled and normalised on the worker) and int64 byte sequences.
  torch::manual_seed(0);
  const ImageDataset images(torch::randint(0, 256, {300, 3, 8, 8}, torch::kByte),
                            torch::randint(0, 10, {300}, torch::kLong),
                            ImageDatasetOptions().mean({0.3}).std({0.7}));
  std::vector<uint8_t> bytes(5000);
  std::mt19937 byte_rng(1);
  for (uint8_t& b : bytes)
    b = static_cast<uint8_t>(byte_rng());
  const SequenceDataset sequences(bytes, SequenceDatasetOptions(16));
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE(seed);
    check_against_synchronous(images, seed);
    check_against_synchronous(sequences, seed + 100);
  }
}

TEST(Prefetcher, ExceptionsComeBackFromNextForTheirBatchOnly) {
  for (const int64_t depth : {0, 1, 3}) {
    ProbeDataset dataset(100);
    Prefetcher prefetcher(dataset, depth);
    prefetcher.request({1, 2});
    prefetcher.request({3, -7, 4});
    prefetcher.request({5});
    EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({10, 20})));
    try {
      prefetcher.next();
      ADD_FAILURE() << "expected the worker's InputError, depth " << depth;
    } catch (const InputError& error) {
      EXPECT_THAT(error.what(), HasSubstr("index -7 is poisoned"));
    }
    EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({50})));
    EXPECT_EQ(prefetcher.pending(), 0);
  }
}

TEST(Prefetcher, NextWithoutARequestIsALogicError) {
  ProbeDataset dataset(10);
  Prefetcher prefetcher(dataset, 2);
  EXPECT_THROW(prefetcher.next(), std::logic_error);
  Prefetcher synchronous(dataset, 0);
  EXPECT_THROW(synchronous.next(), std::logic_error);
  EXPECT_THROW(Prefetcher(dataset, -1), InputError);
}

TEST(Prefetcher, HoldsAtMostDepthBatches) {
  ProbeDataset dataset(100);
  Prefetcher prefetcher(dataset, 3);
  for (int64_t i = 0; i < 10; ++i)
    prefetcher.request({i});
  ASSERT_TRUE(eventually([&] { return dataset.finished >= 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dataset.started, 3);  // nobody took a batch, so no fourth gather started
  EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({0})));
  ASSERT_TRUE(eventually([&] { return dataset.finished >= 4; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dataset.started, 4);
  EXPECT_FALSE(dataset.grad_mode_on);  // the worker gathers under NoGradGuard
}

TEST(Prefetcher, DepthZeroGathersInsideNext) {
  ProbeDataset dataset(100);
  Prefetcher prefetcher(dataset, 0);
  prefetcher.request({4});
  prefetcher.request({5});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dataset.started, 0);
  EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({40})));
  EXPECT_EQ(dataset.started, 1);
}

TEST(Prefetcher, ClearDropsPendingWorkAndWaitsForTheWorker) {
  ProbeDataset dataset(100, std::chrono::milliseconds(20));
  Prefetcher prefetcher(dataset, 2);
  for (int64_t i = 0; i < 6; ++i)
    prefetcher.request({i});
  EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({0})));
  ASSERT_TRUE(eventually([&] { return dataset.started >= 2; }));
  prefetcher.clear();
  EXPECT_EQ(prefetcher.pending(), 0);
  EXPECT_EQ(dataset.started, dataset.finished);  // the worker is idle when clear() returns
  const int started = dataset.started;
  EXPECT_LE(started, 3);  // 1 taken + at most depth 2 gathered ahead
  // A new split after the restart: only the new requests come back, in order.
  prefetcher.request({40, 41});
  prefetcher.request({42});
  EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({400, 410})));
  EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({420})));
  EXPECT_THROW(prefetcher.next(), std::logic_error);
  EXPECT_EQ(dataset.started, started + 2);
}

TEST(Prefetcher, DestructorStopsWithPendingWork) {
  ProbeDataset dataset(100, std::chrono::milliseconds(30));
  const auto start = Clock::now();
  {
    Prefetcher prefetcher(dataset, 2);
    for (int64_t i = 0; i < 50; ++i)
      prefetcher.request({i});
    ASSERT_TRUE(eventually([&] { return dataset.started >= 1; }));
  }
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(dataset.started, dataset.finished);  // the gather in progress finished
  EXPECT_LE(dataset.started, 2);                 // nothing was taken: at most depth gathers
  EXPECT_LT(elapsed, std::chrono::seconds(1));   // 50 gathers would take 1.5 s
  // Destroying an idle prefetcher, or one that never had work, is fine too.
  { Prefetcher idle(dataset, 4); }
}

TEST(Prefetcher, LoadingOverlapsCompute) {
  // 10 batches of 20 ms loading and 20 ms "compute": about 400 ms in sequence, about 220 ms
  // overlapped. Sleeps need no CPU, so the bound holds on a busy 2-core machine.
  ProbeDataset dataset(100, std::chrono::milliseconds(20));
  const auto start = Clock::now();
  Prefetcher prefetcher(dataset, 2);
  for (int64_t i = 0; i < 10; ++i)
    prefetcher.request({i});
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(torch::equal(prefetcher.next().inputs, torch::tensor({10 * i})));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  EXPECT_LT(ms, 340.0) << "loading did not overlap compute";
}

}  // namespace
}  // namespace bigbatch::data
