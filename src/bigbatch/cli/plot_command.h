// `bigbatch plot`: SVG charts of one or more runs from their metrics.jsonl.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace bigbatch::cli {

/// What the command line gave `bigbatch plot`.
struct PlotOptions {
  std::vector<std::string> run_dirs;  ///< run directories, each with a metrics.jsonl
  /// Where the charts go; empty: <run_dir>/charts for one run, runs/plot-<YYYYmmdd-HHMMSS> for
  /// several.
  std::string out_dir;
};

/// Runs `bigbatch plot` and prints the files written. Throws InputError for bad input.
int run_plot(const PlotOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
