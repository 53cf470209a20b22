#include "bigbatch/cli/app.h"

#include <CLI/CLI.hpp>
#include <exception>

#include "bigbatch/cli/train_command.h"
#include "bigbatch/core/check.h"

namespace bigbatch::cli {

namespace {

void add_config_options(CLI::App& command, TrainCommandOptions& options) {
  command.add_option("-c,--config", options.config_path, "TOML config file (default: built-in)");
  command
      .add_option("-s,--set", options.overrides,
                  "override a config key, e.g. --set batch.global_batch=128 (repeatable)")
      ->type_name("KEY=VALUE");
}

}  // namespace

int run_app(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "bigbatch: train with any global batch in small memory by exact gradient accumulation",
      "bigbatch"};
  app.set_version_flag("--version", std::string("bigbatch ") + BIGBATCH_VERSION);
  app.require_subcommand(1);

  TrainCommandOptions train_options;
  int64_t steps = 0;
  std::string run_dir;
  CLI::App* train = app.add_subcommand(
      "train", "Train a built-in model (default: a byte-level GPT on Debian's fortunes)");
  add_config_options(*train, train_options);
  train->add_option("--steps", steps, "shortcut for --set train.steps=N");
  train->add_option("--run-dir", run_dir, "shortcut for --set train.run_dir=DIR");
  train->add_flag("--plan", train_options.plan_only, "print the plan and exit without training");

  TrainCommandOptions config_options;
  CLI::App* config = app.add_subcommand(
      "config", "Print every config key with the value in effect and its meaning, as TOML");
  add_config_options(*config, config_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error, out, err);
    return code == 0 ? 0 : 2;
  }

  try {
    if (train->parsed()) {
      if (steps != 0)
        train_options.overrides.push_back("train.steps=" + std::to_string(steps));
      if (!run_dir.empty())
        train_options.overrides.push_back("train.run_dir=" + run_dir);
      return run_train(train_options, out);
    }
    return run_config(config_options, out);
  } catch (const InputError& error) {
    out.flush();
    err << "error: " << error.what() << "\n";
    return 2;
  } catch (const std::exception& error) {
    out.flush();
    err << "error: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace bigbatch::cli
