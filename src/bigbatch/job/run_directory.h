// The run directory: where a training run writes its config, plan, metrics, checkpoints, charts
// and summary, and how a resumed run finds it again.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "bigbatch/engine/checkpoint.h"
#include "bigbatch/engine/trainer.h"

namespace bigbatch::job {

/// Creates the run directory and returns its path. `requested` empty:
/// runs/<name>-<YYYYmmdd-HHMMSS> (with -2, -3, ... if taken). A requested directory that exists
/// and is not empty is refused with InputError, so no earlier run is overwritten.
std::string create_run_dir(const std::string& requested, const std::string& name);

/// Whether <run_dir>/checkpoints holds a checkpoint file.
bool has_checkpoints(const std::string& run_dir);

/// A run directory that a job created and that died before its first checkpoint holds nothing
/// worth keeping: removes its files (config.toml, plan.txt, metrics.jsonl, checkpoints/, event
/// files) so that it can start again. Leaves a directory with other files, or a finished one,
/// alone. Returns whether it was cleared.
bool clear_unstarted_run(const std::string& run_dir, std::ostream& out);

/// Cuts the metrics file at `path` back to its first `bytes` bytes (what the checkpoint had
/// seen), so the windows after the checkpoint, which the resumed run trains again, are not
/// listed twice. Returns false, changing nothing, when the file is shorter than that.
bool truncate_metrics(const std::string& path, int64_t bytes);

/// Makes the run directory fit the checkpoint being resumed: the metrics file loses the lines
/// written after it, and summary.json goes (the run is not finished any more).
void rewind_run_dir(const std::string& run_dir, const engine::LoadedCheckpoint& loaded,
                    std::ostream& out);

/// Writes <run_dir>/summary.json (atomically): the run's figures and the final sample.
void write_summary(const std::string& run_dir, const engine::TrainSummary& summary,
                   const std::string& sample);

}  // namespace bigbatch::job
