// The optimizer, schedule and loss scaler a job builds for its workload, and the trainer's view
// of them: shared by TrainingJob and the benchmark commands that drive engine::Trainer alone.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "bigbatch/core/threads.h"
#include "bigbatch/dist/communicator.h"
#include "bigbatch/engine/loss_scaler.h"
#include "bigbatch/engine/lr_schedule.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/job/training_job.h"
#include "bigbatch/job/workload.h"

namespace bigbatch::job {

/// What a run needs besides the workload, held by pointer so that a setup stays valid when
/// this moves.
struct TrainingParts {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<engine::LrSchedule> schedule;
  std::unique_ptr<engine::LossScaler> loss_scaler;  ///< null when loss scaling is off
  engine::TrainerOptions trainer;                   ///< options.trainer for `steps` steps
};

/// Builds the parts for `steps` optimizer steps of `plan` (its lr peaks the schedule) and
/// validates the trainer options (InputError naming the field).
TrainingParts make_training_parts(const TrainingJobOptions& options, const Workload& w,
                                  const engine::Plan& plan, int64_t steps);

/// The trainer's view of `w`, `parts` and `plan` (which must outlive the trainer), as one rank
/// of `communicator`'s job or alone (null).
engine::TrainingSetup training_setup(const Workload& w, const TrainingParts& parts,
                                     const engine::Plan& plan,
                                     dist::Communicator* communicator = nullptr);

/// Moves the workload's module to options.device and runs its objective under autocast to
/// options.precision there (nothing for fp32): every forward pass through it, training,
/// evaluation and the micro-batch trial.
void place_workload(Workload& w, const TrainingJobOptions& options);

/// Applies options.bf16_matmul, options.attention and options.block_kernel, then options.threads:
/// automatic ones for the backend that the precision and those kernels use (oneDNN for native bf16
/// products), this machine's cores shared by `processes` ranks each running
/// trainer.concurrent_micro_batches passes at once. Returns the settings in effect.
ThreadSettings apply_thread_options(const TrainingJobOptions& options, int64_t processes = 1);

/// The OpenMP threads of one pass at a time for `processes` ranks (what apply_thread_options
/// gives a run of trainer.concurrent_micro_batches = 1), applying nothing; call it after
/// apply_thread_options. Evaluation runs one pass, so it gets these in a run of several.
int one_pass_openmp_threads(const TrainingJobOptions& options, int64_t processes);

}  // namespace bigbatch::job
