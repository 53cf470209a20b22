#include "bigbatch/job/run_directory.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/engine/summary_json.h"
#include "bigbatch/io/atomic_file.h"

namespace bigbatch::job {

namespace fs = std::filesystem;

std::string create_run_dir(const std::string& requested, const std::string& name) {
  std::error_code error;
  fs::path path = requested;
  if (requested.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
    const fs::path base = fs::path("runs") / (name + "-" + stamp);
    path = base;
    for (int suffix = 2; fs::exists(path, error); ++suffix) {
      path = base.string() + "-" + std::to_string(suffix);
    }
  } else if (fs::exists(path, error)) {
    BB_CHECK_INPUT(fs::is_directory(path, error), "run directory ", requested,
                   " exists and is not a directory");
    BB_CHECK_INPUT(fs::is_empty(path, error), "run directory ", requested,
                   " already holds files of another run; choose a new directory or remove it");
  }
  fs::create_directories(path, error);
  BB_CHECK_INPUT(!error, "cannot create run directory ", path.string(), ": ", error.message());
  return path.string();
}
bool has_checkpoints(const std::string& run_dir) {
  std::error_code error;
  const std::string directory = run_dir + "/checkpoints";
  return fs::is_directory(directory, error) && !engine::list_checkpoints(directory).empty();
}

bool clear_unstarted_run(const std::string& run_dir, std::ostream& out) {
  std::error_code error;
  const fs::path dir = run_dir;
  if (!fs::exists(dir / "config.toml", error) || fs::exists(dir / "summary.json", error))
    return false;
  const std::vector<std::string> ours = {"config.toml", "plan.txt", "metrics.jsonl", "checkpoints"};
  std::vector<fs::path> items;
  for (const auto& item : fs::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    if (std::find(ours.begin(), ours.end(), name) == ours.end() &&
        name.rfind("events.out.tfevents.", 0) != 0)
      return false;  // someone else's file: leave the directory to create_run_dir's refusal
    items.push_back(item.path());
  }
  for (const fs::path& item : items)
    fs::remove_all(item, error);
  out << "auto-resume: " << run_dir
      << " holds a run that stopped before its first checkpoint; starting it again\n";
  return true;
}

bool truncate_metrics(const std::string& path, int64_t bytes) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (error || static_cast<int64_t>(size) < bytes)
    return false;
  fs::resize_file(path, static_cast<uintmax_t>(bytes), error);
  BB_CHECK_INPUT(!error, "cannot cut ", path, " back to ", bytes, " bytes: ", error.message());
  return true;
}

void rewind_run_dir(const std::string& run_dir, const engine::LoadedCheckpoint& loaded,
                    std::ostream& out) {
  const nlohmann::json run = nlohmann::json::parse(loaded.run_json);
  const std::string metrics = run_dir + "/metrics.jsonl";
  if (run.contains("metrics_bytes") &&
      !truncate_metrics(metrics, run.at("metrics_bytes").get<int64_t>()))
    out << "resume: " << metrics << " is shorter than when the checkpoint was written; "
        << "appending to it as it is\n";
  std::error_code error;
  fs::remove(run_dir + "/summary.json", error);
}

void write_summary(const std::string& run_dir, const engine::TrainSummary& s,
                   const std::string& sample) {
  nlohmann::json summary = engine::to_json(s);
  summary["finished"] = true;
  summary["tokens_per_second"] = static_cast<double>(s.tokens) / s.train_seconds;
  summary["sample"] = sample;
  io::write_file_atomically(
      run_dir + "/summary.json",
      summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace bigbatch::job
