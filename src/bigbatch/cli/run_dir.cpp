#include "bigbatch/cli/run_dir.h"

#include <ctime>
#include <filesystem>

#include "bigbatch/core/check.h"

namespace bigbatch::cli {

namespace fs = std::filesystem;

std::string create_run_dir(const std::string& requested, const std::string& model) {
  std::error_code error;
  fs::path path = requested;
  if (requested.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
    const fs::path base = fs::path("runs") / (model + "-" + stamp);
    path = base;
    for (int suffix = 2; fs::exists(path, error); ++suffix) {
      path = base.string() + "-" + std::to_string(suffix);
    }
  } else if (fs::exists(path, error)) {
    BB_CHECK_INPUT(fs::is_directory(path, error), "train.run_dir = ", requested,
                   " exists and is not a directory");
    BB_CHECK_INPUT(fs::is_empty(path, error), "train.run_dir = ", requested,
                   " already holds files of another run; choose a new directory or remove it");
  }
  fs::create_directories(path, error);
  BB_CHECK_INPUT(!error, "cannot create run directory ", path.string(), ": ", error.message());
  return path.string();
}

}  // namespace bigbatch::cli
