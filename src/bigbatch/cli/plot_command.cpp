#include "bigbatch/cli/plot_command.h"

#include <filesystem>

#include "bigbatch/job/run_chart_files.h"
#include "bigbatch/job/run_directory.h"

namespace bigbatch::cli {

namespace fs = std::filesystem;

int run_plot(const PlotOptions& options, std::ostream& out) {
  std::string out_dir = options.out_dir;
  if (out_dir.empty() && options.run_dirs.size() == 1)
    out_dir = (fs::path(options.run_dirs.front()) / "charts").string();
  if (out_dir.empty()) {
    for (const std::string& run_dir : options.run_dirs)  // no output directory for bad input
      job::check_run_dir_has_metrics(run_dir);
    out_dir = job::create_run_dir("", "plot");
  }
  for (const std::string& path : job::write_run_charts(options.run_dirs, out_dir))
    out << "written: " << path << "\n";
  return 0;
}

}  // namespace bigbatch::cli
