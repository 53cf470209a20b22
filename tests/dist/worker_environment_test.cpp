// Reading torchrun's variables: what a worker is told, and every way it can be told wrong.
#include "bigbatch/dist/worker_environment.h"

#include <gtest/gtest.h>

#include <map>

#include "bigbatch/engine/window_sampler.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using testing::input_error_of;

dist::EnvironmentLookup lookup_in(std::map<std::string, std::string> variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end())
      return std::nullopt;
    return found->second;
  };
}

TEST(WorkerEnvironment, AbsentWithoutWorldSize) {
  EXPECT_FALSE(dist::read_worker_environment(lookup_in({{"RANK", "1"}})).has_value());
}

TEST(WorkerEnvironment, ReadsTorchrunsVariables) {
  const auto env = dist::read_worker_environment(lookup_in({{"RANK", "3"},
                                                            {"WORLD_SIZE", "4"},
                                                            {"LOCAL_RANK", "1"},
                                                            {"LOCAL_WORLD_SIZE", "2"},
                                                            {"MASTER_ADDR", "10.0.0.7"},
                                                            {"MASTER_PORT", "29511"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 29511);
}

TEST(WorkerEnvironment, LocalValuesDefaultToOneMachine) {
  const auto env = dist::read_worker_environment(
      lookup_in({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_port, 29500);
}

TEST(WorkerEnvironment, RejectsEachBadValueNamingTheVariable) {
  const std::map<std::string, std::string> good = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto error_with = [&](const std::string& name, const std::optional<std::string>& value) {
    std::map<std::string, std::string> variables = good;
    if (value)
      variables[name] = *value;
    else
      variables.erase(name);
    return input_error_of([&] { dist::read_worker_environment(lookup_in(variables)); });
  };
  EXPECT_NE(error_with("WORLD_SIZE", "two").find("WORLD_SIZE=\"two\" is not an integer"),
            std::string::npos);
  EXPECT_NE(error_with("WORLD_SIZE", "0").find("WORLD_SIZE=0 must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_with("RANK", std::nullopt).find("RANK is not"), std::string::npos);
  EXPECT_NE(error_with("RANK", "2").find("RANK=2 must lie in [0, WORLD_SIZE) = [0, 2)"),
            std::string::npos);
  EXPECT_NE(error_with("RANK", "-1").find("RANK=-1"), std::string::npos);
  EXPECT_NE(error_with("MASTER_ADDR", std::nullopt).find("MASTER_ADDR is not"), std::string::npos);
  EXPECT_NE(error_with("MASTER_PORT", "70000").find("MASTER_PORT=70000 must lie in [1, 65535]"),
            std::string::npos);
  EXPECT_NE(error_with("LOCAL_RANK", "5").find("LOCAL_RANK=5"), std::string::npos);
}

TEST(ShardRange, ShardsCoverTheItemsInOrderAndDifferByAtMostOne) {
  for (const int64_t world_size : {1, 2, 3, 4, 7}) {
    for (const int64_t count : {0, 1, 2, 5, 24, 64, 65}) {
      int64_t next = 0;
      for (int64_t rank = 0; rank < world_size; ++rank) {
        const engine::ShardRange shard = engine::shard_range(count, rank, world_size);
        EXPECT_EQ(shard.begin, next);
        EXPECT_GE(shard.size(), count / world_size);
        EXPECT_LE(shard.size(), count / world_size + 1);
        next = shard.end;
      }
      EXPECT_EQ(next, count) << count << " items over " << world_size;
    }
  }
  EXPECT_EQ(engine::shard_range(5, 0, 2).size(), 3);
  EXPECT_EQ(engine::shard_range(1, 1, 2).size(), 0);  // an empty shard
}

}  // namespace
}  // namespace bigbatch
