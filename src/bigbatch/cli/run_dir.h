// The run directory: where a training run writes its config, plan, metrics and summary.
#pragma once

#include <string>

namespace bigbatch::cli {

/// Creates the run directory and returns its path. `requested` empty:
/// runs/<model>-<YYYYmmdd-HHMMSS> (with -2, -3, ... if taken). A requested directory that exists
/// and is not empty is refused with InputError, so no earlier run is overwritten.
std::string create_run_dir(const std::string& requested, const std::string& model);

}  // namespace bigbatch::cli
