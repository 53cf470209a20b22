// The charts of runs, written as SVG files from their metrics.jsonl (`bigbatch plot`, and every
// finished run's charts/).
#pragma once

#include <string>
#include <vector>

namespace bigbatch::job {

/// Reads the metrics.jsonl of every run, renders the charts of metrics::render_run_charts (several
/// runs overlaid, each labelled with its directory's name) and writes them into `out_dir`,
/// created if missing. Returns the paths written. Every run is read before anything is written;
/// a missing directory, a directory without metrics.jsonl and a metrics file without a window or
/// evaluation are InputErrors naming the path.
std::vector<std::string> write_run_charts(const std::vector<std::string>& run_dirs,
                                          const std::string& out_dir);

/// Throws the InputError write_run_charts would for `run_dir`: not a directory, no metrics.jsonl,
/// or nothing in it yet.
void check_run_dir_has_metrics(const std::string& run_dir);

}  // namespace bigbatch::job
