// `bigbatch export RUN_DIR --out PATH`: a training run's model as safetensors + JSON spec, or, for
// a pretrained model (model.kind = "hf"), as a Hugging Face model directory or a PEFT adapter.
#pragma once

#include <ostream>
#include <string>

namespace bigbatch::cli {

/// What the command line gave `bigbatch export`.
struct ExportCommandOptions {
  std::string run_dir;     ///< the training run
  std::string out;         ///< the safetensors file to write (its spec goes beside it, .json)
  std::string checkpoint;  ///< a checkpoint file to export; empty = the run's newest usable one
  /// "auto" (bigbatch for the built-in models, hf for model.kind = "hf"), "bigbatch" (OUT.
  /// safetensors + OUT.json), "hf" (a model directory, adapters merged) or "peft" (the adapters
  /// only, in PEFT's layout).
  std::string format = "auto";
  bool overwrite = false;  ///< replace an output directory that holds files (hf, peft)
};

/// Exports the model of a run's checkpoint (the newest one that verifies, passing over and
/// naming unusable newer files, unless options.checkpoint names one): the model spec saved in
/// the checkpoint rebuilds the model without the training data, the checkpoint's weights are
/// copied in, and export_model writes OUT and its .json spec. Throws InputError naming the file
/// and the cause for a run without checkpoints, an unusable checkpoint or one without a model
/// spec; returns the exit code otherwise. A run of a pretrained model is rebuilt from the config
/// saved in its checkpoint (the model directory, adapters and data, for the classes) and written
/// with models::save_hf_model.
int run_export(const ExportCommandOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
