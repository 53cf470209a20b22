#include "bigbatch/metrics/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace bigbatch::metrics {

namespace {

constexpr double kPanelWidth = 480;
constexpr double kPanelHeight = 360;
constexpr double kLeft = 70;
constexpr double kRight = 20;
constexpr double kTop = 60;
constexpr double kBottom = 50;
constexpr size_t kMostMarkedPoints = 60;
const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.4g", value);
  return buffer;
}

/// Evenly spaced "nice" tick values covering [low, high].
std::vector<double> nice_ticks(double low, double high) {
  const double span = high - low;
  const double raw = span / 5.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double factor : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = factor * magnitude;
    if (span / step <= 6)
      break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

/// A panel's data ranges and where a value lands on it.
struct PanelFrame {
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;  ///< x in log2 units on a log2 axis
  double offset_x = 0;
  bool log2_x = false;
  static constexpr double kPlotWidth = kPanelWidth - kLeft - kRight;
  static constexpr double kPlotHeight = kPanelHeight - kTop - kBottom;

  double px(double x) const {
    const double v = log2_x ? std::log2(x) : x;
    return offset_x + kLeft + (v - x_min) / (x_max - x_min) * kPlotWidth;
  }
  double py(double y) const {
    return kTop + kPlotHeight - (y - y_min) / (y_max - y_min) * kPlotHeight;
  }
};

/// The frame that holds every finite point of the panel's series (y from 0, 5% headroom).
PanelFrame frame_of(const ChartPanel& panel, double offset_x) {
  double x_min = std::numeric_limits<double>::infinity();
  double x_max = -x_min;
  double y_min = x_min;
  double y_max = -x_min;
  for (const Series& s : panel.series) {
    if (s.xs.size() != s.ys.size()) {
      throw std::invalid_argument("series " + s.name + " has " + std::to_string(s.xs.size()) +
                                  " x values and " + std::to_string(s.ys.size()) + " y values");
    }
    for (size_t i = 0; i < s.xs.size(); ++i) {
      if (!std::isfinite(s.xs[i]) || !std::isfinite(s.ys[i]))
        continue;
      if (panel.log2_x && s.xs[i] <= 0) {
        throw std::invalid_argument("series " + s.name + " has x <= 0 on a log2 axis");
      }
      const double x = panel.log2_x ? std::log2(s.xs[i]) : s.xs[i];
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, s.ys[i]);
      y_max = std::max(y_max, s.ys[i]);
    }
  }
  if (!std::isfinite(x_min))
    x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  y_min = std::min(0.0, y_min);  // charts of sizes and rates start at zero
  if (x_max == x_min)
    x_max = x_min + 1;
  if (y_max == y_min)
    y_max = y_min + 1;
  y_max += (y_max - y_min) * 0.05;
  return {x_min, x_max, y_min, y_max, offset_x, panel.log2_x};
}

/// Title, frame, grid lines, ticks and axis labels.
void render_axes(std::ostringstream& svg, const ChartPanel& panel, const PanelFrame& f) {
  const double plot_w = PanelFrame::kPlotWidth;
  const double plot_h = PanelFrame::kPlotHeight;
  const double offset_x = f.offset_x;
  svg << "<text x=\"" << offset_x + kPanelWidth / 2 << "\" y=\"40\" text-anchor=\"middle\" "
      << "font-size=\"14\" font-weight=\"bold\">" << escape(panel.title) << "</text>\n";
  svg << "<rect x=\"" << offset_x + kLeft << "\" y=\"" << kTop << "\" width=\"" << plot_w
      << "\" height=\"" << plot_h << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (const double t : nice_ticks(f.y_min, f.y_max)) {
    svg << "<line x1=\"" << offset_x + kLeft << "\" x2=\"" << offset_x + kLeft + plot_w
        << "\" y1=\"" << f.py(t) << "\" y2=\"" << f.py(t) << "\" stroke=\"#ddd\"/>\n"
        << "<text x=\"" << offset_x + kLeft - 6 << "\" y=\"" << f.py(t) + 4
        << "\" text-anchor=\"end\" font-size=\"11\">" << number(t) << "</text>\n";
  }
  std::vector<double> x_ticks;
  if (panel.log2_x) {
    for (double e = std::ceil(f.x_min); e <= f.x_max + 1e-9; e += 1)
      x_ticks.push_back(std::exp2(e));
  } else {
    x_ticks = nice_ticks(f.x_min, f.x_max);
  }
  for (const double t : x_ticks) {
    svg << "<text x=\"" << f.px(t) << "\" y=\"" << kTop + plot_h + 16
        << "\" text-anchor=\"middle\" font-size=\"11\">" << number(t) << "</text>\n";
  }
  svg << "<text x=\"" << offset_x + kLeft + plot_w / 2 << "\" y=\"" << kPanelHeight - 12
      << "\" text-anchor=\"middle\" font-size=\"12\">" << escape(panel.x_label) << "</text>\n";
  svg << "<text transform=\"translate(" << offset_x + 16 << "," << kTop + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << escape(panel.y_label)
      << "</text>\n";
}

/// Each series as a polyline (with markers when it has few points) and its legend entry.
void render_series(std::ostringstream& svg, const ChartPanel& panel, const PanelFrame& f) {
  const double offset_x = f.offset_x;
  for (size_t k = 0; k < panel.series.size(); ++k) {
    const Series& s = panel.series[k];
    const size_t index = s.colour >= 0 ? static_cast<size_t>(s.colour) : k;
    const char* colour = kColours[index % (sizeof(kColours) / sizeof(kColours[0]))];
    const char* dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
    const bool markers = s.xs.size() <= kMostMarkedPoints;
    std::ostringstream points;
    for (size_t i = 0; i < s.xs.size(); ++i) {
      if (!std::isfinite(s.xs[i]) || !std::isfinite(s.ys[i]))
        continue;
      points << f.px(s.xs[i]) << "," << f.py(s.ys[i]) << " ";
      if (markers) {
        svg << "<circle cx=\"" << f.px(s.xs[i]) << "\" cy=\"" << f.py(s.ys[i])
            << "\" r=\"3\" fill=\"" << colour << "\"/>\n";
      }
    }
    svg << "<polyline points=\"" << points.str() << "\" fill=\"none\" stroke=\"" << colour << "\""
        << dash << " stroke-width=\"" << (markers ? 2 : 1.5) << "\"/>\n";
    const double legend_y = kTop + 16 + 16 * static_cast<double>(k);
    svg << "<line x1=\"" << offset_x + kLeft + 10 << "\" x2=\"" << offset_x + kLeft + 30
        << "\" y1=\"" << legend_y - 4 << "\" y2=\"" << legend_y - 4 << "\" stroke=\"" << colour
        << "\"" << dash << " stroke-width=\"2\"/>\n"
        << "<text x=\"" << offset_x + kLeft + 36 << "\" y=\"" << legend_y << "\" font-size=\"11\">"
        << escape(s.name) << "</text>\n";
  }
}

void render_panel(std::ostringstream& svg, const ChartPanel& panel, double offset_x) {
  const PanelFrame frame = frame_of(panel, offset_x);
  render_axes(svg, panel, frame);
  render_series(svg, panel, frame);
}

}  // namespace

std::string render_svg(const std::vector<ChartPanel>& panels, const std::string& title) {
  const double width = kPanelWidth * static_cast<double>(std::max<size_t>(1, panels.size()));
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\""
      << kPanelHeight << "\" viewBox=\"0 0 " << width << " " << kPanelHeight
      << "\" font-family=\"sans-serif\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << width / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">"
      << escape(title) << "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    render_panel(svg, panels[i], kPanelWidth * static_cast<double>(i));
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace bigbatch::metrics
