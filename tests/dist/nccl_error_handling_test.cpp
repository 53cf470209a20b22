// The NCCL settings that let a dead peer be named: set where absent, a user's left alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "bigbatch/dist/process_group.h"

namespace bigbatch {
namespace {

/// Unsets the four spellings for the test, and puts back what was there before.
class NcclEnvironment : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT",
                                           "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                           "NCCL_ASYNC_ERROR_HANDLING"};
  void SetUp() override {
    for (int i = 0; i < 4; ++i) {
      const char* value = std::getenv(kNames[i]);
      saved_[i] = value != nullptr ? std::optional<std::string>(value) : std::nullopt;
      ::unsetenv(kNames[i]);
    }
  }
  void TearDown() override {
    for (int i = 0; i < 4; ++i) {
      if (saved_[i])
        ::setenv(kNames[i], saved_[i]->c_str(), 1);
      else
        ::unsetenv(kNames[i]);
    }
  }
  static std::string value_of(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "(unset)";
  }

 private:
  std::optional<std::string> saved_[4];
};

TEST_F(NcclEnvironment, SetsBlockingWaitAndCleanUpOnlyWhereUnset) {
  const auto settings = dist::prepare_nccl_error_handling();
  ASSERT_EQ(settings.size(), 2u);
  EXPECT_EQ(settings[0].name, "TORCH_NCCL_BLOCKING_WAIT");
  EXPECT_EQ(settings[0].value, "1");
  EXPECT_FALSE(settings[0].already_set);
  EXPECT_EQ(settings[1].name, "TORCH_NCCL_ASYNC_ERROR_HANDLING");
  EXPECT_EQ(settings[1].value, "2");
  EXPECT_FALSE(settings[1].already_set);
  EXPECT_EQ(value_of("TORCH_NCCL_BLOCKING_WAIT"), "1");
  EXPECT_EQ(value_of("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "2");
}

TEST_F(NcclEnvironment, LeavesTheUsersValuesInEitherSpelling) {
  ::setenv("TORCH_NCCL_BLOCKING_WAIT", "0", 1);
  ::setenv("NCCL_ASYNC_ERROR_HANDLING", "1", 1);
  const auto settings = dist::prepare_nccl_error_handling();
  ASSERT_EQ(settings.size(), 2u);
  EXPECT_EQ(settings[0].name, "TORCH_NCCL_BLOCKING_WAIT");
  EXPECT_EQ(settings[0].value, "0");
  EXPECT_TRUE(settings[0].already_set);
  EXPECT_EQ(settings[1].name, "NCCL_ASYNC_ERROR_HANDLING");
  EXPECT_EQ(settings[1].value, "1");
  EXPECT_TRUE(settings[1].already_set);
  EXPECT_EQ(value_of("TORCH_NCCL_BLOCKING_WAIT"), "0");
  // The newer spelling would win over the user's older one; it stays unset.
  EXPECT_EQ(value_of("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "(unset)");
}

TEST_F(NcclEnvironment, CallingTwiceChangesNothing) {
  dist::prepare_nccl_error_handling();
  const auto again = dist::prepare_nccl_error_handling();
  EXPECT_EQ(again[0].value, "1");
  EXPECT_TRUE(again[0].already_set);
  EXPECT_EQ(again[1].value, "2");
  EXPECT_EQ(value_of("TORCH_NCCL_BLOCKING_WAIT"), "1");
}

}  // namespace
}  // namespace bigbatch
