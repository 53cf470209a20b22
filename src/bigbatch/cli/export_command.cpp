#include "bigbatch/cli/export_command.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/cli/option_keys.h"
#include "bigbatch/cli/train_config.h"
#include "bigbatch/core/check.h"
#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/io/checkpoint_file.h"
#include "bigbatch/job/hf_workload.h"
#include "bigbatch/models/hf_export.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/models/model_info.h"
#include "bigbatch/models/model_spec.h"

namespace bigbatch::cli {

namespace {

/// The library names in save_hf_model's errors, as the command line spells them.
const std::vector<std::pair<std::string, std::string>>& export_flags() {
  static const std::vector<std::pair<std::string, std::string>> flags = {
      {"HfExportOptions.output_directory", "bigbatch export --out"},
      {"HfExportOptions.overwrite", "--overwrite"},
      {"HfExportOptions.mode = kPeft", "bigbatch export --format peft"},
      {"export it with kMerged", "export it with --format hf"},
  };
  return flags;
}

/// Exports a run of model.kind = "hf" from its checkpoint: the model is rebuilt as the run
/// built it (model directory, adapters, classes of its data) and gets the checkpoint's weights.
int export_hf(const ExportCommandOptions& options, const engine::LoadedCheckpoint& checkpoint,
              const TrainConfig& config, std::ostream& out) {
  const std::string format = options.format == "auto" ? "hf" : options.format;
  BB_CHECK_INPUT(format == "hf" || format == "peft", "bigbatch export --format ", options.format,
                 ": a run of a pretrained model (model.kind = \"hf\") exports as \"hf\" (a "
                 "model directory) or \"peft\" (its adapters)");
  job::HfWorkloadParts parts;
  const job::Workload workload = job::build_hf_workload(*config.hf, &parts);
  engine::load_model_weights(checkpoint.path, *workload.module);
  std::vector<std::string> written;
  try {
    written = models::save_hf_model(
        parts.model,
        models::HfExportOptions()
            .source_directory(config.hf->model_path)
            .output_directory(options.out)
            .mode(format == "peft" ? models::HfExportMode::kPeft : models::HfExportMode::kMerged)
            .class_names(parts.class_names)
            .modules_to_save(config.hf->adapter.lora_options.trainable())
            .overwrite(options.overwrite));
  } catch (const InputError& error) {
    throw InputError(with_names_replaced(error.what(), export_flags()));
  }
  const int64_t all = models::parameter_count(*workload.module);
  out << "exported " << parts.model.model_type << " ("
      << (format == "peft" ? cat(models::trainable_parameter_count(*workload.module),
                                 " adapter parameters of its ", all)
                           : cat(all, " parameters"))
      << ") from " << checkpoint.path << " (optimizer step " << checkpoint.state.summary.steps
      << ") to " << options.out << ":";
  for (const std::string& file : written)
    out << " " << file;
  out << "\n";
  return 0;
}

}  // namespace

int run_export(const ExportCommandOptions& options, std::ostream& out) {
  BB_CHECK_INPUT(!options.out.empty(),
                 "bigbatch export needs --out PATH (a .safetensors file, or a directory for "
                 "--format hf or peft)");
  BB_CHECK_INPUT(options.format == "auto" || options.format == "bigbatch" ||
                     options.format == "hf" || options.format == "peft",
                 "bigbatch export --format must be auto, bigbatch, hf or peft, got \"",
                 options.format, "\"");
  engine::LoadedCheckpoint checkpoint;
  if (options.checkpoint.empty()) {
    const std::string directory = options.run_dir + "/checkpoints";
    BB_CHECK_INPUT(std::filesystem::is_directory(options.run_dir), options.run_dir,
                   " is not a directory; bigbatch export takes a training run's directory");
    checkpoint = engine::newest_checkpoint_info(directory);
    for (const std::string& skipped : checkpoint.skipped)
      out << "export: passed over " << skipped << "\n";
  } else {
    try {
      checkpoint = engine::read_checkpoint_info(options.checkpoint);
    } catch (const io::CheckpointFileError& error) {
      throw InputError(error.what());
    }
  }
  const nlohmann::ordered_json run = nlohmann::ordered_json::parse(checkpoint.run_json);
  if (run.contains("config") && run.at("config").is_string()) {
    ConfigReader reader = ConfigReader::from_string(run.at("config").get<std::string>(),
                                                    checkpoint.path + " (its config)");
    const TrainConfig config = read_train_config(reader);
    if (config.hf)
      return export_hf(options, checkpoint, config, out);
  }
  BB_CHECK_INPUT(options.format == "auto" || options.format == "bigbatch",
                 "bigbatch export --format ", options.format, ": ", checkpoint.path,
                 " holds a built-in model, which exports as \"bigbatch\" (safetensors and a JSON "
                 "spec)");
  BB_CHECK_INPUT(run.contains("model"), checkpoint.path,
                 " holds no model spec (it was written by an older bigbatch); train the run "
                 "again to export it");
  for (const std::string& file : {options.out, models::spec_path_for(options.out)}) {
    BB_CHECK_INPUT(options.overwrite || !std::filesystem::exists(file), "bigbatch export --out ",
                   options.out, ": ", file,
                   " already exists; choose another path or pass --overwrite to replace it");
  }
  const models::ModelSpec spec = models::spec_from_json(run.at("model"), checkpoint.path);
  const models::BuiltModel built = models::build_model(spec);
  engine::load_model_weights(checkpoint.path, *built.module);
  models::export_model(*built.module, spec, options.out);
  out << "exported " << models::to_string(spec.kind) << " ("
      << models::parameter_count(*built.module) << " parameters) from " << checkpoint.path
      << " (optimizer step " << checkpoint.state.summary.steps << ")\n  weights: " << options.out
      << "\n  spec:    " << models::spec_path_for(options.out) << "\n";
  return 0;
}

}  // namespace bigbatch::cli
