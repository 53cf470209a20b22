// Charts of training runs from their metrics: loss, accuracy, learning rate, memory, throughput.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/metrics/jsonl_reader.h"
#include "bigbatch/metrics/svg_chart.h"

namespace bigbatch::metrics {

/// One run to chart: its name in the legends and what its metrics.jsonl holds.
struct RunCurves {
  std::string label;
  MetricsHistory history;
};

/// One chart, a standalone SVG document, and the file name it is meant for ("loss.svg").
struct ChartFile {
  std::string name;
  std::string svg;
};

/// Trailing means of `window` consecutive points: one point per x from the window-th on (from the
/// last when there are fewer points than `window`), each the mean of the `window` ys up to it.
Series trailing_mean(std::string name, const std::vector<double>& xs, const std::vector<double>& ys,
                     size_t window);

/// The number of steps the training loss of a run with `steps` windows is averaged over in
/// loss.svg: 1 up to 99 steps, then steps / 50 (6 for 300 steps), so a curve has 50 to 100
/// steps' worth of detail whatever its length.
size_t loss_smoothing(size_t steps);

/// The charts of `runs` overlaid (a run keeps its colour in every chart; more than one run adds
/// its label to the legend), each against the optimizer step, one file each:
///   loss.svg        training loss (see loss_smoothing) and validation loss (dashed)
///   accuracy.svg    validation accuracy in percent, only when some run has one
///   lr.svg          the learning rate each step used
///   memory.svg      peak tensor memory of each step, MiB
///   throughput.svg  tokens per second, or samples per second for runs whose loss is per sample
/// Skipped (non-finite) windows are left out. `title` heads every chart.
std::vector<ChartFile> render_run_charts(const std::vector<RunCurves>& runs,
                                         const std::string& title);

}  // namespace bigbatch::metrics
