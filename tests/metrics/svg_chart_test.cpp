#include "bigbatch/metrics/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/test_support.h"

namespace bigbatch {
namespace {

using metrics::ChartPanel;
using metrics::Series;

using testing::count_occurrences;

TEST(SvgChart, DrawsEveryPointLineAndLegendEntry) {
  ChartPanel memory{"peak memory", "micro-batch", "MiB", true, {}};
  memory.series.push_back({"none", {1, 2, 4, 8}, {10, 20, 40, 80}});
  memory.series.push_back({"blocks <ckpt>", {1, 2, 4, 8}, {5, 7, 11, 19}});
  ChartPanel speed{"throughput", "micro-batch", "tok/s", true, {}};
  speed.series.push_back({"none", {1, 2, 4, 8}, {100, 180, 300, NAN}});
  const std::string svg = metrics::render_svg({memory, speed}, "bench & memory");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("width=\"960\""), std::string::npos);
  EXPECT_EQ(count_occurrences(svg, "<polyline"), 3u);
  EXPECT_EQ(count_occurrences(svg, "<circle"), 11u);              // the NaN point is skipped
  EXPECT_NE(svg.find("blocks &lt;ckpt&gt;"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("bench &amp; memory"), std::string::npos);
  EXPECT_NE(svg.find(">8</text>"), std::string::npos);  // a power-of-two tick
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(SvgChart, RejectsMismatchedSeries) {
  ChartPanel panel{"t", "x", "y", false, {{"bad", {1, 2}, {1}}}};
  EXPECT_THROW(metrics::render_svg({panel}, "t"), std::invalid_argument);
  ChartPanel log_panel{"t", "x", "y", true, {{"zero", {0, 2}, {1, 2}}}};
  EXPECT_THROW(metrics::render_svg({log_panel}, "t"), std::invalid_argument);
}

TEST(SvgChart, ChosenColourDashesAndNoDotsOnLongSeries) {
  ChartPanel panel{"t", "x", "y", false, {}};
  std::vector<double> xs(61);
  for (size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<double>(i);
  panel.series.push_back({"long", xs, xs, 2, false});
  panel.series.push_back({"val", {1, 2}, {1, 2}, 2, true});
  const std::string svg = metrics::render_svg({panel}, "t");
  EXPECT_EQ(count_occurrences(svg, "<circle"), 2u);             // only the short series has dots
  EXPECT_EQ(count_occurrences(svg, "stroke=\"#2ca02c\""), 4u);  // palette colour 2, legend included
  EXPECT_EQ(count_occurrences(svg, "stroke-dasharray=\"6,4\""),
            2u);  // the dashed line and its legend
}

}  // namespace
}  // namespace bigbatch
