// Resuming a run: which config changes a resumed run may make, and its directory's files.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bigbatch::cli {

/// How a config key may differ between a run and its resumption.
enum class ResumeChange {
  kFree,       ///< does not change what is computed (threads, logging, evaluation, checkpoints)
  kPermitted,  ///< changes later steps but continues the same run: needs --allow-changes
  kForbidden,  ///< another model, data, batch or optimizer: a new run, never a resumption
};

/// The class of a config key ("batch.micro_batch" -> kPermitted).
ResumeChange resume_change_of(const std::string& key);

/// Compares a run's saved config values with those of its resumption (key -> value as TOML
/// text, ConfigReader::resolved_values). Returns one notice per accepted change; throws
/// InputError listing every change that is not accepted, each with both values: kForbidden
/// always, kPermitted unless `allow_changes`.
std::vector<std::string> check_resume_changes(
    const std::vector<std::pair<std::string, std::string>>& saved,
    const std::vector<std::pair<std::string, std::string>>& resumed, bool allow_changes);

/// Cuts the metrics file at `path` back to its first `bytes` bytes (what the checkpoint had
/// seen), so the windows after the checkpoint, which the resumed run trains again, are not
/// listed twice. Returns false, changing nothing, when the file is shorter than that.
bool truncate_metrics(const std::string& path, int64_t bytes);

}  // namespace bigbatch::cli
