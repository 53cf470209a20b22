// `bigbatch reproduce NAME`: trains every run of a named experiment and reports them together.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace bigbatch::cli {

/// What the command line gave `bigbatch reproduce`.
struct ReproduceOptions {
  std::string name;                    ///< the experiment (see cli/experiments.h)
  std::vector<std::string> overrides;  ///< --set, applied to every run after the experiment's own
  std::string out_dir;                 ///< empty: runs/reproduce-<name>-<time>
  bool list = false;                   ///< print the experiments and stop
};

/// Trains the experiment's runs one after the other, each exactly as `bigbatch train` with the
/// run's overrides would (its run directory, config.toml, metrics.jsonl and summary.json under
/// the output directory, its console output in <id>.log), then writes results.md (table, largest
/// accuracy difference, the command of every run), results.json and curves.svg (training loss
/// and validation accuracy of all runs against epochs). Every run's configuration is checked
/// before the first one starts, so a bad --set leaves nothing behind (InputError).
int run_reproduce(const ReproduceOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
