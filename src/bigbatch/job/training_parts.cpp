#include "bigbatch/job/training_parts.h"

#include "bigbatch/engine/optimizer.h"
#include "bigbatch/job/stop_signals.h"

namespace bigbatch::job {

TrainingParts make_training_parts(const TrainingJobOptions& options, const Workload& w,
                                  const engine::Plan& plan, int64_t steps) {
  TrainingParts parts;
  parts.optimizer =
      engine::make_optimizer(*w.module, engine::OptimizerOptions(options.optimizer).lr(plan.lr));
  parts.schedule = std::make_unique<engine::LrSchedule>(
      engine::LrScheduleOptions(options.schedule).peak_lr(plan.lr).total_steps(steps));
  if (loss_scaling_enabled(options))
    parts.loss_scaler = std::make_unique<engine::LossScaler>(options.loss_scaler);
  parts.trainer = engine::TrainerOptions(options.trainer).total_steps(steps);
  engine::validate(parts.trainer);
  return parts;
}

engine::TrainingSetup training_setup(const Workload& w, const TrainingParts& parts,
                                     const engine::Plan& plan, dist::Communicator* communicator) {
  engine::TrainingSetup setup;
  setup.model = w.module.get();
  setup.objective = w.objective.get();
  setup.optimizer = parts.optimizer.get();
  setup.schedule = parts.schedule.get();
  setup.plan = &plan;
  setup.train_data = w.train.get();
  setup.val_data = w.val.get();
  setup.loss_scaler = parts.loss_scaler.get();
  for (const auto& hooks : w.window_hooks)
    setup.window_hooks.push_back(hooks.get());
  setup.communicator = communicator;
  return setup;
}

void place_workload(Workload& w, const TrainingJobOptions& options) {
  w.module->to(options.device);
  if (options.precision != nn::Precision::kFp32) {
    w.objective = std::make_unique<engine::AutocastObjective>(
        std::move(w.objective), options.precision, options.device.type());
  }
}

namespace {

/// options.threads for the backend the precision and kernels use (after apply_thread_options
/// set those kernels), the cores shared by `sharers` threads of work.
ThreadRequest thread_request(const TrainingJobOptions& options, int64_t sharers) {
  const bool native_bf16 =
      options.precision != nn::Precision::kFp32 && nn::bf16_matmul() == nn::Bf16Matmul::kNative;
  const bool onednn_fp32 =
      options.precision == nn::Precision::kFp32 && nn::fp32_matmul() == nn::Fp32Matmul::kOneDnn;
  ThreadRequest request = options.threads;
  if (native_bf16 || onednn_fp32)
    request.backend(MatmulBackend::kOneDnn);
  return request.processes(sharers);
}

}  // namespace

ThreadSettings apply_thread_options(const TrainingJobOptions& options, int64_t processes) {
  nn::set_bf16_matmul(options.bf16_matmul);
  nn::set_fp32_matmul(options.fp32_matmul, "TrainingJobOptions.fp32_matmul");
  nn::set_row_split(options.row_split);
  nn::set_attention_kernel(options.attention, "TrainingJobOptions.attention");
  nn::set_block_kernel(options.block_kernel);
  return apply_threads(
      thread_request(options, processes * options.trainer.concurrent_micro_batches()));
}

int one_pass_openmp_threads(const TrainingJobOptions& options, int64_t processes) {
  return planned_threads(thread_request(options, processes)).openmp;
}

}  // namespace bigbatch::job
