// render_grid: aligned columns for benchmark tables.
#include <gtest/gtest.h>

#include <stdexcept>

#include "bigbatch/core/grid.h"

namespace bigbatch {
namespace {

TEST(Grid, AlignsColumnsUnderTheHeaderAndRightAlignsAllButTheFirst) {
  const std::string text =
      render_grid("bench", {"policy", "micro-batch", "peak"},
                  {{"none", "8", "33.3 MiB"}, {"blocks", "64", "1.2 GiB"}, {"every:2"}});
  EXPECT_EQ(text,
            "bench\n"
            "------------------------------\n"
            "policy   micro-batch      peak\n"
            "------------------------------\n"
            "none               8  33.3 MiB\n"
            "blocks            64   1.2 GiB\n"
            "every:2\n"
            "------------------------------\n");
}

TEST(Grid, ARuleIsAtLeastAsWideAsTheTitle) {
  const std::string text = render_grid("a long title for two cells", {"a", "b"}, {{"1", "2"}});
  EXPECT_NE(text.find("\n--------------------------\na  b\n"), std::string::npos) << text;
}

TEST(Grid, ARowWithMoreCellsThanColumnsIsRefused) {
  EXPECT_THROW(render_grid("t", {"a"}, {{"1", "2"}}), std::invalid_argument);
}

}  // namespace
}  // namespace bigbatch
