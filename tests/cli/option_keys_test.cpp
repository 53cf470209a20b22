// cli/option_keys: library errors name Options fields; the command line shows config keys.
#include "bigbatch/cli/option_keys.h"

#include <gtest/gtest.h>

#include <set>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/engine/plan.h"
#include "support/test_support.h"

namespace bigbatch::cli {
namespace {

TEST(OptionKeys, ReplaceFieldsByTheirKeys) {
  EXPECT_EQ(with_config_keys("BatchOptions.micro_batch = 128 is larger than "
                             "BatchOptions.global_batch = 64"),
            "batch.micro_batch = 128 is larger than batch.global_batch = 64");
  EXPECT_EQ(with_config_keys("TrainerOptions.total_steps = 0 must be positive"),
            "train.steps = 0 must be positive");
  // A longer name that starts like a field is left alone; text without fields is unchanged.
  EXPECT_EQ(with_config_keys("OptimizerOptions.lrx"), "OptimizerOptions.lrx");
  EXPECT_EQ(with_config_keys("no field here"), "no field here");
}

TEST(OptionKeys, EveryKeyIsAKeyOfTheConfig) {
  ConfigReader reader;
  const TrainConfig config = read_train_config(reader);
  std::set<std::string> keys;
  for (const auto& [key, value] : config.resolved_values)
    keys.insert(key);
  for (const auto& [field, key] : option_keys())
    EXPECT_EQ(keys.count(key), 1u) << field << " -> " << key;
}

TEST(OptionKeys, ALibraryErrorReachesTheUserWithTheKey) {
  const std::string message = testing::input_error_of(
      [] { engine::resolve_plan(engine::BatchOptions().global_batch(64).micro_batch(128)); });
  EXPECT_NE(message.find("BatchOptions.micro_batch = 128"), std::string::npos) << message;
  EXPECT_NE(with_config_keys(message).find("batch.micro_batch = 128 is larger than "
                                           "batch.global_batch = 64"),
            std::string::npos)
      << with_config_keys(message);
}

}  // namespace
}  // namespace bigbatch::cli
