#include "bigbatch/job/run_chart_files.h"

#include <filesystem>

#include "bigbatch/core/check.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/metrics/jsonl_reader.h"
#include "bigbatch/metrics/run_charts.h"

namespace bigbatch::job {

namespace {

namespace fs = std::filesystem;

/// The run's directory name, or the path as given when another run has the same name.
std::string label_of(const std::string& run_dir, const std::vector<std::string>& run_dirs) {
  const auto name = [](const std::string& dir) {
    fs::path path = fs::absolute(dir).lexically_normal();
    if (path.filename().empty())
      path = path.parent_path();  // "runs/a/" names "a"
    return path.filename().string();
  };
  int same = 0;
  for (const std::string& other : run_dirs)
    same += name(other) == name(run_dir) ? 1 : 0;
  return same > 1 ? run_dir : name(run_dir);
}

metrics::RunCurves read_run(const std::string& run_dir, const std::vector<std::string>& run_dirs) {
  std::error_code error;
  BB_CHECK_INPUT(fs::is_directory(run_dir, error), "no run directory ", run_dir,
                 fs::exists(run_dir, error) ? ": it is not a directory" : ": it does not exist");
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  BB_CHECK_INPUT(fs::is_regular_file(path, error), run_dir, " holds no metrics.jsonl (", path,
                 "): not a bigbatch run directory, or a run that has not started training");
  metrics::RunCurves run{label_of(run_dir, run_dirs),
                         metrics::parse_metrics_jsonl(io::read_file(path), path)};
  BB_CHECK_INPUT(!run.history.windows.empty() || !run.history.evals.empty(), path,
                 " holds no training step and no evaluation yet: nothing to plot");
  return run;
}

}  // namespace

std::vector<std::string> write_run_charts(const std::vector<std::string>& run_dirs,
                                          const std::string& out_dir) {
  BB_CHECK_INPUT(!run_dirs.empty(), "charts need at least one run directory");
  std::vector<metrics::RunCurves> runs;
  std::string title = run_dirs.size() == 1 ? "bigbatch run " : "bigbatch runs ";
  for (const std::string& run_dir : run_dirs) {
    runs.push_back(read_run(run_dir, run_dirs));
    title += (runs.size() > 1 ? ", " : "") + runs.back().label;
  }
  std::error_code error;
  fs::create_directories(out_dir, error);
  BB_CHECK_INPUT(!error, "cannot create ", out_dir, ": ", error.message());
  std::vector<std::string> written;
  for (const metrics::ChartFile& chart : metrics::render_run_charts(runs, title)) {
    written.push_back((fs::path(out_dir) / chart.name).string());
    io::write_file_atomically(written.back(), chart.svg);
  }
  return written;
}

void check_run_dir_has_metrics(const std::string& run_dir) {
  read_run(run_dir, {run_dir});
}

}  // namespace bigbatch::job
