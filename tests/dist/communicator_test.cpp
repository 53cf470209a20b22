// The collectives over c10d/Gloo between ranks on loopback, and what a rank that leaves or hangs
// does to the others.
#include "bigbatch/dist/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "dist/rank_threads.h"

namespace bigbatch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Communicator, AllReduceBroadcastGatherAndAnyOverThreeRanks) {
  testing::run_ranks(3, [](dist::Communicator& communicator) {
    const int64_t rank = communicator.rank();
    EXPECT_EQ(communicator.world_size(), 3);
    torch::Tensor sum = torch::tensor({1.0 + rank, 10.0 * rank}, torch::kFloat64);
    communicator.all_reduce(sum, dist::Traffic::kGradients, "test sum");
    EXPECT_TRUE(torch::equal(sum, torch::tensor({6.0, 30.0}, torch::kFloat64)));

    torch::Tensor value = torch::full({4}, static_cast<float>(rank + 7));
    communicator.broadcast(value, 2, "test broadcast");
    EXPECT_TRUE(torch::equal(value, torch::full({4}, 9.0f)));

    const std::vector<torch::Tensor> gathered =
        communicator.all_gather(torch::tensor({rank * rank}, torch::kInt64), "test gather");
    ASSERT_EQ(gathered.size(), 3u);
    for (int64_t other = 0; other < 3; ++other)
      EXPECT_EQ(gathered[other].item<int64_t>(), other * other);

    EXPECT_FALSE(communicator.any(false, "test any"));
    EXPECT_TRUE(communicator.any(rank == 1, "test any"));

    const dist::CommStats stats = communicator.stats();
    EXPECT_EQ(stats.gradients.calls, 1);
    EXPECT_EQ(stats.gradients.bytes, 16);
    EXPECT_EQ(stats.control.calls, 4);
    EXPECT_EQ(stats.control.bytes, 16 + 8 + 8 + 8);
  });
}

TEST(Communicator, BroadcastModuleGivesEveryRankRankZerosWeights) {
  testing::run_ranks(2, [](dist::Communicator& communicator) {
    torch::nn::Linear layer(3, 2);
    torch::nn::BatchNorm1d norm(2);
    {
      const torch::NoGradGuard no_grad;
      layer->weight.fill_(static_cast<float>(communicator.rank() + 1));
      norm->running_mean.fill_(static_cast<float>(communicator.rank() + 5));
      norm->num_batches_tracked.fill_(communicator.rank() + 3);  // int64: its own broadcast
    }
    torch::nn::Sequential model(layer, norm);
    dist::broadcast_module(communicator, *model);
    EXPECT_TRUE(torch::equal(layer->weight, torch::ones({2, 3})));
    EXPECT_TRUE(torch::equal(norm->running_mean, torch::full({2}, 5.0f)));
    EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 3);

    {
      const torch::NoGradGuard no_grad;  // the ranks' statistics drift apart, then are averaged
      norm->running_var.fill_(static_cast<float>(2 * communicator.rank() + 1));
      norm->num_batches_tracked.fill_(communicator.rank() + 10);
    }
    dist::average_buffers(communicator, *model);
    EXPECT_TRUE(torch::equal(norm->running_var, torch::full({2}, 2.0f)));
    EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), communicator.rank() + 10)
        << "integer buffers are counters, not statistics";
  });
}

TEST(Communicator, ARankThatLeavesIsNamedByTheOthersAtTheirNextCollective) {
  std::string message;
  double waited = 0.0;
  testing::run_ranks(
      2,
      [&](dist::Communicator& communicator) {
        torch::Tensor value = torch::ones({8});
        communicator.all_reduce(value, dist::Traffic::kControl, "first sum");
        if (communicator.rank() == 1)
          return;  // leaves: its connection and heartbeat end with it
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const auto start = Clock::now();
        try {
          communicator.all_reduce(value, dist::Traffic::kGradients, "all-reduce of bucket 1");
          ADD_FAILURE() << "a collective without the other rank succeeded";
        } catch (const dist::DistError& error) {
          message = error.what();
        }
        waited = seconds_since(start);
      },
      /*timeout_seconds=*/20.0);
  EXPECT_NE(message.find("rank 0 of 2: all-reduce of bucket 1 failed"), std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 1 stopped responding"), std::string::npos) << message;
  EXPECT_LT(waited, 10.0) << "a closed connection must fail at once, not after the timeout";
}

TEST(Communicator, ARankThatHangsFailsTheOthersAfterTheTimeout) {
  std::string message;
  double waited = 0.0;
  std::atomic<bool> done{false};
  testing::run_ranks(
      2,
      [&](dist::Communicator& communicator) {
        if (communicator.rank() == 1) {
          while (!done.load())  // alive (its heartbeat beats) but never joins the collective
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return;
        }
        const auto start = Clock::now();
        try {
          torch::Tensor value = torch::ones({8});
          communicator.all_reduce(value, dist::Traffic::kControl, "all-reduce of the counts");
          ADD_FAILURE() << "a collective without the other rank succeeded";
        } catch (const dist::DistError& error) {
          message = error.what();
        }
        waited = seconds_since(start);
        done.store(true);
      },
      /*timeout_seconds=*/2.0);
  EXPECT_NE(message.find("all-reduce of the counts failed after"), std::string::npos) << message;
  EXPECT_NE(message.find("dist.timeout = 2 s"), std::string::npos) << message;
  EXPECT_NE(message.find("heartbeat is still beating"), std::string::npos) << message;
  EXPECT_GE(waited, 2.0);
  EXPECT_LT(waited, 2.0 + 8.0);  // the timeout plus the heartbeat check
}

TEST(Communicator, AMissingRankFailsTheConnectionAfterTheTimeout) {
  const int64_t port = dist::free_port();
  const auto start = Clock::now();
  try {
    dist::connect(testing::loopback_rank(0, 2, port, 1.5));
    FAIL() << "connected without rank 1";
  } catch (const dist::DistError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 0: the 2 ranks did not all join through 127.0.0.1:"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("within 1.5 s"), std::string::npos) << message;
  }
  EXPECT_LT(seconds_since(start), 1.5 + 5.0);
}

}  // namespace
}  // namespace bigbatch
