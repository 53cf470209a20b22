// Resuming a run: which config changes a resumed run may make.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/cli/train_command.h"
#include "bigbatch/cli/train_config.h"

namespace bigbatch::cli {

/// Compares a run's saved config values with those of its resumption (key -> value as TOML
/// text, ConfigReader::resolved_values), each key judged by the ResumeChange its getter declared
/// (`changes`, ConfigReader::resume_changes; a key not there is kForbidden). Returns one notice
/// per accepted change; throws InputError listing every change that is not accepted, each with
/// both values: kForbidden always, kPermitted unless `allow_changes`.
std::vector<std::string> check_resume_changes(
    const std::vector<std::pair<std::string, std::string>>& saved,
    const std::vector<std::pair<std::string, std::string>>& resumed,
    const std::map<std::string, ResumeChange>& changes, bool allow_changes);

/// The config a run trains with and, when it continues an earlier run, where that run is.
struct RunStart {
  TrainConfig config;
  std::string resume_dir;            ///< non-empty: continue the run in this directory
  std::vector<std::string> notices;  ///< config changes accepted for the resumption
  bool micro_batch_changed = false;  ///< batch.micro_batch differs from the saved run's
};

/// Decides from the command line whether the run is new or resumed (--resume, or --auto-resume
/// on a run directory with checkpoints) and with which config: a resumed run's own config.toml
/// plus the overrides, its changes checked. `leader` (rank 0, or a single process) may clear an
/// --auto-resume directory that stopped before its first checkpoint.
RunStart decide_start(const TrainCommandOptions& options, bool leader, std::ostream& out);

}  // namespace bigbatch::cli
