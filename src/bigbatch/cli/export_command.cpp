#include "bigbatch/cli/export_command.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"
#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/io/checkpoint_file.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/models/model_info.h"
#include "bigbatch/models/model_spec.h"

namespace bigbatch::cli {

int run_export(const ExportCommandOptions& options, std::ostream& out) {
  BB_CHECK_INPUT(!options.out.empty(), "bigbatch export needs --out FILE (a .safetensors file)");
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
  BB_CHECK_INPUT(run.contains("model"), checkpoint.path,
                 " holds no model spec (it was written by an older bigbatch); train the run "
                 "again to export it");
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
