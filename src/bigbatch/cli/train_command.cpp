#include "bigbatch/cli/train_command.h"

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/cli/data_parallel_job.h"
#include "bigbatch/cli/resume.h"
#include "bigbatch/core/check.h"
#include "bigbatch/dist/worker_environment.h"
#include "bigbatch/job/builtin_workload.h"
#include "bigbatch/job/hf_workload.h"
#include "bigbatch/job/training_job.h"

namespace bigbatch::cli {

TrainConfig load_config(const TrainCommandOptions& options) {
  ConfigReader reader =
      options.config_path.empty() ? ConfigReader() : ConfigReader::from_file(options.config_path);
  for (const std::string& assignment : options.overrides)
    reader.set_override(assignment);
  return read_train_config(reader);
}

int run_train(const TrainCommandOptions& options, std::ostream& terminal) {
  BB_CHECK_INPUT(options.nproc >= 1, "--nproc ", options.nproc, " must be at least 1");
  if (options.nproc > 1)
    return launch_train(options, terminal);
  const std::optional<dist::WorkerEnvironment> worker = dist::read_worker_environment();
  const bool leader = !worker || worker->rank == 0;
  std::ostream quiet(nullptr);
  // Everything the user supplied is checked before anything is written.
  const RunStart start = decide_start(options, leader, leader ? terminal : quiet);
  const TrainConfig& config = start.config;
  job::TrainingJobOptions job_options = config.job;
  job_options.run.config_text = config.resolved_toml;
  job_options.run.plan_only = options.plan_only;
  job_options.run.resume_dir = start.resume_dir;
  job_options.run.keep_checkpoint_micro_batch = !start.micro_batch_changed;
  job_options.run.resume_notices = start.notices;
  const int64_t world_size = worker ? worker->world_size : 1;
  job_options.run.resume_command = [world_size](const std::string& run_dir) {
    return cat("bigbatch train ", world_size > 1 ? cat("--nproc ", world_size, " ") : "",
               "--resume ", run_dir);
  };
  job::BuiltinModelOptions model = config.model;
  if (!start.resume_dir.empty())
    model.init_from.clear();  // a resumed run's weights come from its checkpoint
  job::TrainingJob training(job_options, [&config, &model] {
    if (config.hf)
      return job::build_hf_workload(*config.hf);
    return job::build_builtin_workload(model, job::load_builtin_data(model.kind, config.data),
                                       pass_site_of(config));
  });
  return training.run(terminal).exit_code;
}

int run_config(const TrainCommandOptions& options, std::ostream& out) {
  out << load_config(options).resolved_toml;
  return 0;
}

}  // namespace bigbatch::cli
