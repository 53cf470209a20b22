// Training checkpoints: everything needed to continue a run exactly, saved at window boundaries.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/trainer.h"

namespace bigbatch::engine {

/// Where checkpoints go and how many stay.
struct CheckpointOptions {
  /// The directory of the `step-NNNNNNNN.ckpt` files (created if missing).
  TORCH_ARG(std::string, directory) = "checkpoints";
  /// The newest this many files are kept; older ones are removed only after a new one is
  /// complete on disk (>= 1).
  TORCH_ARG(int64_t, keep) = 3;
};

/// The parts of a run whose state a checkpoint holds (not owned). The loss scaler may be null.
struct CheckpointParts {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  LossScaler* loss_scaler = nullptr;
  const Plan* plan = nullptr;
  /// Data parallel: the rank whose random generator states load_checkpoint restores (every rank
  /// reads the same file; the checkpoint holds each rank's states).
  int64_t rank = 0;
};

/// A CheckpointSink that writes one file per save: the model's parameters and buffers, the
/// optimizer state, the loss scaler, the random generators, the loop state (data position,
/// counters, micro-batch) and the caller's annotation, with a versioned header and a CRC-32 (see
/// io/checkpoint_file.h), atomically: a process killed at any moment, even during the write,
/// leaves the previous checkpoints intact. Checkpoints are taken at window boundaries only, so
/// no partial window gradient ever needs saving.
///
///   Checkpointer checkpointer({&model, &optimizer, &scaler, &plan},
///                             CheckpointOptions().directory(run_dir + "/checkpoints"));
///   setup.checkpoints = &checkpointer;            // the trainer saves at its boundaries
///   ...
///   LoadedCheckpoint loaded = load_newest_checkpoint(dir, parts);   // in a new process
///   trainer.resume(loaded.state);
class Checkpointer : public CheckpointSink {
 public:
  /// Creates the directory and removes temporary files that a killed save left behind. Throws
  /// InputError for keep < 1 and std::runtime_error when the directory cannot be created.
  Checkpointer(const CheckpointParts& parts, CheckpointOptions options);
  /// Text of a JSON object stored in every checkpoint under "run" (for example the resolved
  /// config); called at each save, so it may describe the moment (a metrics file's length).
  void set_annotation(std::function<std::string()> annotate) { annotate_ = std::move(annotate); }
  /// Writes `<directory>/step-<steps>.ckpt`, then removes the oldest beyond `keep`. Throws
  /// std::runtime_error naming the path and the system error when the file cannot be written
  /// (a full disk); the previous checkpoints are then untouched.
  void save(const LoopState& state) override;
  /// The file the last save() wrote; empty before the first.
  const std::string& last_path() const { return last_path_; }

 private:
  CheckpointParts parts_;
  CheckpointOptions options_;
  std::function<std::string()> annotate_;
  std::string last_path_;
};

/// A checkpoint read back.
struct LoadedCheckpoint {
  std::string path;      ///< the file
  LoopState state;       ///< for Trainer::resume
  std::string run_json;  ///< the annotation saved with it ("{}" without one)
  /// Newer files that could not be used, each with the reason (automatic fallback).
  std::vector<std::string> skipped;
};

/// Restores `parts` (model, optimizer, loss scaler, random generators) from the checkpoint at
/// `path` and returns its loop state. Nothing is changed unless the whole file verifies and
/// fits: throws io::CheckpointFileError for a missing, truncated, corrupt or other-version file,
/// and InputError naming the file and the difference for a checkpoint of another model
/// (a tensor missing, extra, or of another shape or dtype), another global batch or world
/// size, another optimizer, or a loss scaler present on one side only.
LoadedCheckpoint load_checkpoint(const std::string& path, const CheckpointParts& parts);

/// The newest checkpoint in `directory` that loads: when the newest file is truncated or
/// corrupt, the one before it is tried, and so on; LoadedCheckpoint::skipped says which files were
/// passed over and why. Throws InputError when the directory holds no checkpoint, or none that
/// loads (naming each file and its cause); a checkpoint of another model is an error, not a
/// reason to fall back.
LoadedCheckpoint load_newest_checkpoint(const std::string& directory, const CheckpointParts& parts);

/// The run annotation and loop state of the newest checkpoint in `directory` that verifies
/// (read_checkpoint_info), with the same fallback and errors as load_newest_checkpoint.
LoadedCheckpoint newest_checkpoint_info(const std::string& directory);

/// The checkpoint files in `directory`, oldest first (by step); empty when there is none.
std::vector<std::string> list_checkpoints(const std::string& directory);

/// The run annotation and loop state of a checkpoint file, without restoring anything (for
/// export and inspection). Throws io::CheckpointFileError for an unusable file.
LoadedCheckpoint read_checkpoint_info(const std::string& path);

/// Copies the model tensors of the checkpoint at `path` into `model` (for export); names, shapes
/// and dtypes must match as in load_checkpoint.
void load_model_weights(const std::string& path, torch::nn::Module& model);

}  // namespace bigbatch::engine
