// `bigbatch train`: read the config, show the plan, train, evaluate, sample.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "bigbatch/cli/train_config.h"

namespace bigbatch::cli {

/// What the command line gave `bigbatch train`.
struct TrainCommandOptions {
  std::string config_path;             ///< TOML file; empty = built-in defaults
  std::vector<std::string> overrides;  ///< "key=value", applied after the file
  bool plan_only = false;              ///< print the plan and stop; nothing is written
  /// Continue the run in this directory from its newest usable checkpoint, with its own
  /// config.toml (plus `overrides`); empty = a new run.
  std::string resume_dir;
  /// When train.run_dir holds checkpoints, continue that run instead of refusing the directory;
  /// otherwise start it (the same command line then both starts and resumes a job).
  bool auto_resume = false;
  /// Accept config changes on resume that alter the later steps (ResumeChange::kPermitted).
  bool allow_changes = false;
  /// Start this many ranks of a data-parallel job on this machine (dist::launch_local_workers);
  /// 1 = this process trains (alone, or as the rank the environment names: RANK, WORLD_SIZE).
  int64_t nproc = 1;
};

/// Reads the config file (or the built-in defaults) and applies the overrides, in order.
TrainConfig load_config(const TrainCommandOptions& options);

/// Runs training (job::TrainingJob on the configured built-in model). Everything the user supplied
/// is validated before the run directory is created, so a bad input leaves nothing behind; the run
/// directory counts as finished only once summary.json is in it. Checkpoints go to
/// <run_dir>/checkpoints (checkpoint.every, .keep). SIGINT or SIGTERM stop the run at the next
/// window boundary after a checkpoint, and the exit code is 128 + the signal; a second signal kills
/// at once. With WORLD_SIZE > 1 in the environment (torchrun's variables) this process is one rank
/// of a data-parallel job: rank 0 prints and writes the run directory, the others only train. With
/// nproc > 1 it launches the ranks. Throws InputError for bad input; returns the exit code
/// otherwise.
int run_train(const TrainCommandOptions& options, std::ostream& out);

/// Prints the configuration in effect (every key, its value and meaning) as TOML.
int run_config(const TrainCommandOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
