// The experiments `bigbatch reproduce NAME` runs: each a set of `bigbatch train` runs that differ
// in a few config keys, so that every number in docs/EXPERIMENTS.md can be rerun one by one.
#pragma once

#include <string>
#include <vector>

namespace bigbatch::cli {

/// One training run of an experiment.
struct ExperimentRun {
  std::string id;                      ///< directory name of the run, for example "64x4"
  std::string label;                   ///< legend and table label, for example "64 x 4"
  std::vector<std::string> overrides;  ///< "key=value" on top of the experiment's base
};

/// A named experiment: runs that share a base configuration.
struct Experiment {
  std::string name;               ///< what `bigbatch reproduce` is given
  std::string question;           ///< what it answers, one sentence
  std::vector<std::string> base;  ///< "key=value" every run shares (on the built-in defaults)
  std::vector<ExperimentRun> runs;
  std::string note;  ///< what was cut to fit the time budget, or empty
};

/// Every experiment, in the order `bigbatch reproduce --list` shows them.
const std::vector<Experiment>& experiments();

/// The experiment called `name`; throws InputError listing the names that exist.
const Experiment& find_experiment(const std::string& name);

/// The overrides of `run` in order: the experiment's base, the run's own, then `extra` (the
/// user's --set), so that the user has the last word.
std::vector<std::string> run_overrides(const Experiment& experiment, const ExperimentRun& run,
                                       const std::vector<std::string>& extra);

/// The `bigbatch train` command line that trains `run` alone, for example
/// "bigbatch train -s model.kind=resnet -s batch.micro_batch=64".
std::string train_command_line(const std::vector<std::string>& overrides);

}  // namespace bigbatch::cli
