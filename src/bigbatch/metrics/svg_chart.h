// Line charts as standalone SVG files that open in any browser.
#pragma once

#include <string>
#include <vector>

namespace bigbatch::metrics {

/// One line of a chart.
struct Series {
  std::string name;        ///< shown in the legend
  std::vector<double> xs;  ///< x values, ascending
  std::vector<double> ys;  ///< y values, one per x
  int colour = -1;         ///< index into the palette; -1: the series' position in its panel
  bool dashed = false;     ///< a dashed line (for example validation next to training)
};

/// One panel: axes, ticks, labelled lines with markers and a legend.
struct ChartPanel {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log2_x = false;  ///< powers of two evenly spaced (micro-batch sweeps)
  std::vector<Series> series;
};

/// Renders panels side by side as one SVG document (each panel 480 x 360 px). Non-finite points
/// are skipped; a series of at most 60 points marks each with a dot, a longer one is a plain line.
/// Throws std::invalid_argument for a series whose xs and ys differ in length or, with log2_x, a
/// non-positive x.
std::string render_svg(const std::vector<ChartPanel>& panels, const std::string& title);

}  // namespace bigbatch::metrics
