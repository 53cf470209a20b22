// `bigbatch export RUN_DIR --out FILE`: a training run's model as safetensors + JSON spec.
#pragma once

#include <ostream>
#include <string>

namespace bigbatch::cli {

/// What the command line gave `bigbatch export`.
struct ExportCommandOptions {
  std::string run_dir;     ///< the training run
  std::string out;         ///< the safetensors file to write (its spec goes beside it, .json)
  std::string checkpoint;  ///< a checkpoint file to export; empty = the run's newest usable one
};

/// Exports the model of a run's checkpoint (the newest one that verifies, passing over and
/// naming unusable newer files, unless options.checkpoint names one): the model spec saved in
/// the checkpoint rebuilds the model without the training data, the checkpoint's weights are
/// copied in, and export_model writes OUT and its .json spec. Throws InputError naming the file
/// and the cause for a run without checkpoints, an unusable checkpoint or one without a model
/// spec; returns the exit code otherwise.
int run_export(const ExportCommandOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
