// The command-line front end: argument parsing and error reporting.
#pragma once

#include <ostream>

namespace bigbatch::cli {

/// Runs the bigbatch command line. Returns the process exit code: 0 on success, 2 for bad input
/// (usage, config, data, batch settings) with a message on `err`, 1 for a failure while running.
int run_app(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace bigbatch::cli
