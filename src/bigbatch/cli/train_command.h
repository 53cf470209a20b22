// `bigbatch train`: read the config, show the plan, train, evaluate, sample.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace bigbatch::cli {

/// What the command line gave `bigbatch train`.
struct TrainCommandOptions {
  std::string config_path;             ///< TOML file; empty = built-in defaults
  std::vector<std::string> overrides;  ///< "key=value", applied after the file
  bool plan_only = false;              ///< print the plan and stop; nothing is written
};

/// Runs training. Everything the user supplied is validated before the run directory is created,
/// so a bad input leaves nothing behind; the run directory counts as finished only once
/// summary.json is in it. Throws InputError for bad input; returns the exit code otherwise.
int run_train(const TrainCommandOptions& options, std::ostream& out);

/// Prints the configuration in effect (every key, its value and meaning) as TOML.
int run_config(const TrainCommandOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
