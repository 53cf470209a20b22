#include "bigbatch/cli/resume.h"

#include <filesystem>
#include <map>

#include "bigbatch/core/check.h"

namespace bigbatch::cli {

ResumeChange resume_change_of(const std::string& key) {
  static const std::map<std::string, ResumeChange> classes = {
      {"train.threads", ResumeChange::kFree},
      {"model.bf16_matmul", ResumeChange::kFree},
      {"train.blas_threads", ResumeChange::kFree},
      {"train.prefetch_depth", ResumeChange::kFree},
      {"train.concurrent_micro_batches", ResumeChange::kFree},
      {"train.log_every", ResumeChange::kFree},
      {"train.eval_every", ResumeChange::kFree},
      {"train.eval_samples", ResumeChange::kFree},
      {"train.run_dir", ResumeChange::kFree},
      {"checkpoint.every", ResumeChange::kFree},
      {"checkpoint.keep", ResumeChange::kFree},
      {"dist.timeout", ResumeChange::kFree},
      {"dist.backend", ResumeChange::kFree},
      {"dist.bucket_mb", ResumeChange::kFree},
      {"sample.prompt", ResumeChange::kFree},
      {"sample.bytes", ResumeChange::kFree},
      {"sample.temperature", ResumeChange::kFree},
      {"sample.top_k", ResumeChange::kFree},
      {"batch.micro_batch", ResumeChange::kPermitted},
      {"memory.budget", ResumeChange::kPermitted},
      {"train.steps", ResumeChange::kPermitted},
      {"train.epochs", ResumeChange::kPermitted},
      {"train.on_nonfinite", ResumeChange::kPermitted},
      {"train.max_consecutive_skips", ResumeChange::kPermitted},
  };
  const auto found = classes.find(key);
  return found == classes.end() ? ResumeChange::kForbidden : found->second;
}

std::vector<std::string> check_resume_changes(
    const std::vector<std::pair<std::string, std::string>>& saved,
    const std::vector<std::pair<std::string, std::string>>& resumed, bool allow_changes) {
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
    const ResumeChange kind = resume_change_of(key);
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

bool truncate_metrics(const std::string& path, int64_t bytes) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error || static_cast<int64_t>(size) < bytes)
    return false;
  std::filesystem::resize_file(path, static_cast<uintmax_t>(bytes), error);
  BB_CHECK_INPUT(!error, "cannot cut ", path, " back to ", bytes, " bytes: ", error.message());
  return true;
}

}  // namespace bigbatch::cli
