#include "bigbatch/cli/data_parallel_job.h"

#include <filesystem>
#include <iostream>

#include "bigbatch/core/check.h"
#include "bigbatch/dist/launcher.h"
#include "bigbatch/engine/plan.h"

namespace bigbatch::cli {

namespace fs = std::filesystem;

int launch_train(const TrainCommandOptions& options, std::ostream& out) {
  BB_CHECK_INPUT(!dist::read_worker_environment().has_value(), "--nproc ", options.nproc,
                 " starts the ranks itself, but WORLD_SIZE is set: "
                 "under torchrun (or with RANK/WORLD_SIZE set) leave --nproc out");
  TrainCommandOptions checked = options;
  if (!options.resume_dir.empty()) {
    checked.config_path = options.resume_dir + "/config.toml";
    std::error_code error;
    BB_CHECK_INPUT(fs::exists(checked.config_path, error), options.resume_dir,
                   " is not a bigbatch run directory: it has no config.toml");
  }
  const TrainConfig config = load_config(checked);
  engine::BatchOptions batch = config.job.batch;
  batch.world_size(options.nproc);
  if (config.job.auto_micro_batch)
    batch.micro_batch(0);
  engine::resolve_plan(batch);  // an impossible split is reported once, before any rank starts
  std::vector<std::string> command = {fs::read_symlink("/proc/self/exe").string(), "train"};
  if (!options.config_path.empty())
    command.insert(command.end(), {"--config", options.config_path});
  for (const std::string& override_text : options.overrides)
    command.insert(command.end(), {"--set", override_text});
  if (!options.resume_dir.empty())
    command.insert(command.end(), {"--resume", options.resume_dir});
  if (options.auto_resume)
    command.push_back("--auto-resume");
  if (options.allow_changes)
    command.push_back("--allow-changes");
  if (options.plan_only)
    command.push_back("--plan");
  out << "launching " << options.nproc << " ranks on this machine (dist.timeout "
      << config.job.dist_timeout << " s)\n"
      << std::flush;
  return dist::launch_local_workers(dist::LaunchOptions()
                                        .nproc(options.nproc)
                                        .command(command)
                                        .grace_seconds(config.job.dist_timeout + 30.0),
                                    std::cerr);
}

}  // namespace bigbatch::cli
