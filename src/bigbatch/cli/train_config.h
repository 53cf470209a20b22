// The `bigbatch train` configuration: every key, its default and its meaning, in one place. The
// keys fill the library's Options structs; this file maps them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/job/builtin_workload.h"
#include "bigbatch/job/hf_workload.h"
#include "bigbatch/job/training_job.h"

namespace bigbatch::cli {

/// Everything `bigbatch train` needs, read from TOML and overrides.
struct TrainConfig {
  job::BuiltinModelOptions model;  ///< model.*, gpt.*, mlp.*, resnet.*, bert.*, sample.*
  /// model.kind = "hf": the pretrained model (model.path, hf.*, adapter.*); empty otherwise.
  std::optional<job::HfWorkloadOptions> hf;
  job::BuiltinDataOptions data;  ///< data.*
  job::TrainingJobOptions job;   ///< batch.*, optim.*, schedule.*, loss_scale.*, train.*, ...
  std::string resolved_toml;     ///< the whole configuration in effect, as TOML
  /// Every key and its value in effect as TOML text, to compare a resumed run's config.
  std::vector<std::pair<std::string, std::string>> resolved_values;
  /// How each key may change on resume, as train_config.cpp declared it.
  std::map<std::string, ResumeChange> resume_changes;
};

/// Where `config`'s training passes run (its precision and device), as job::concurrency_need and
/// job::build_builtin_workload take it.
job::PassSite pass_site_of(const TrainConfig& config);

/// Reads every key from `config` (defaults for those absent), then rejects unknown keys.
/// Throws InputError naming the key and value for wrong types and values out of range.
TrainConfig read_train_config(ConfigReader& config);

}  // namespace bigbatch::cli
