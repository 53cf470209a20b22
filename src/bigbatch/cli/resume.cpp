#include "bigbatch/cli/resume.h"

#include <filesystem>
#include <map>

#include "bigbatch/core/check.h"
#include "bigbatch/job/run_directory.h"

namespace bigbatch::cli {

std::vector<std::string> check_resume_changes(
    const std::vector<std::pair<std::string, std::string>>& saved,
    const std::vector<std::pair<std::string, std::string>>& resumed,
    const std::map<std::string, ResumeChange>& changes, bool allow_changes) {
  const std::map<std::string, std::string> before(saved.begin(), saved.end());
  std::vector<std::string> notices;
  std::string refused;
  bool permission_would_help = false;
  bool forbidden = false;
  for (const auto& [key, value] : resumed) {
    const auto found = before.find(key);
    const std::string old_value = found == before.end() ? "(absent)" : found->second;
    if (old_value == value)
      continue;
    const std::string change = cat(key, ": ", old_value, " -> ", value);
    const auto declared = changes.find(key);
    const ResumeChange kind =
        declared == changes.end() ? ResumeChange::kForbidden : declared->second;
    if (kind == ResumeChange::kFree) {
      notices.push_back(cat("resumed with ", change));
    } else if (kind == ResumeChange::kPermitted && allow_changes) {
      notices.push_back(cat("resumed with ", change,
                            " (--allow-changes: the steps from here on differ from "
                            "those the run would have taken)"));
    } else {
      refused += cat("\n  ", change,
                     kind == ResumeChange::kPermitted
                         ? "  (changes the later steps; accepted with --allow-changes)"
                         : "  (another model, data, batch or optimizer: not a resumption)");
      permission_would_help = permission_would_help || kind == ResumeChange::kPermitted;
      forbidden = forbidden || kind == ResumeChange::kForbidden;
    }
  }
  BB_CHECK_INPUT(refused.empty(),
                 "the resumed run's config differs from the one it was saved with:", refused,
                 forbidden ? "\n  a run with these changes is a new run: start it without --resume"
                 : permission_would_help ? "\n  pass --allow-changes to continue anyway"
                                         : "");
  return notices;
}

namespace {

namespace fs = std::filesystem;

std::string value_of(const std::vector<std::pair<std::string, std::string>>& values,
                     const std::string& key) {
  for (const auto& [name, value] : values) {
    if (name == key)
      return value;
  }
  return "";
}

}  // namespace

RunStart decide_start(const TrainCommandOptions& options, bool leader, std::ostream& out) {
  RunStart start;
  if (!options.resume_dir.empty()) {
    BB_CHECK_INPUT(options.config_path.empty(), "--resume continues with the run's own config (",
                   options.resume_dir, "/config.toml); change keys with --set, not --config");
    BB_CHECK_INPUT(!options.auto_resume, "--resume and --auto-resume exclude each other");
    start.resume_dir = options.resume_dir;
  } else {
    start.config = load_config(options);
    if (options.auto_resume) {
      BB_CHECK_INPUT(!start.config.job.run.directory.empty(),
                     "--auto-resume needs a fixed run directory: pass --run-dir DIR or set "
                     "train.run_dir");
      if (job::has_checkpoints(start.config.job.run.directory))
        start.resume_dir = start.config.job.run.directory;
      else if (leader)
        job::clear_unstarted_run(start.config.job.run.directory, out);
    }
  }
  if (start.resume_dir.empty())
    return start;
  TrainCommandOptions saved_options;
  saved_options.config_path = start.resume_dir + "/config.toml";
  std::error_code error;
  BB_CHECK_INPUT(fs::exists(saved_options.config_path, error), start.resume_dir,
                 " is not a bigbatch run directory: it has no config.toml");
  const TrainConfig saved = load_config(saved_options);
  if (!options.resume_dir.empty()) {
    TrainCommandOptions resumed = saved_options;
    resumed.overrides = options.overrides;
    start.config = load_config(resumed);
  }
  start.notices = check_resume_changes(saved.resolved_values, start.config.resolved_values,
                                       start.config.resume_changes, options.allow_changes);
  start.micro_batch_changed = value_of(saved.resolved_values, "batch.micro_batch") !=
                              value_of(start.config.resolved_values, "batch.micro_batch");
  start.config.job.run.directory = start.resume_dir;
  return start;
}

}  // namespace bigbatch::cli
