#include "bigbatch/core/table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace bigbatch {
namespace {

TEST(GroupThousands, GroupsDigitsInThrees) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999), "999");
  EXPECT_EQ(group_thousands(1000), "1,000");
  EXPECT_EQ(group_thousands(78'976), "78,976");
  EXPECT_EQ(group_thousands(1'234'567), "1,234,567");
  EXPECT_EQ(group_thousands(-1000), "-1,000");
  EXPECT_EQ(group_thousands(std::numeric_limits<int64_t>::min()), "-9,223,372,036,854,775,808");
}

}  // namespace
}  // namespace bigbatch
