// Learning-rate schedules as pure functions of the optimizer step.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>

namespace bigbatch::engine {

/// The shape of the learning rate over training.
enum class ScheduleKind {
  kConstant,      ///< the peak lr throughout
  kWarmupCosine,  ///< linear warmup to the peak, then a half cosine down to min_lr_ratio * peak
};

/// Parses "constant" | "warmup_cosine"; throws InputError naming `field` otherwise.
ScheduleKind parse_schedule_kind(const std::string& text, const std::string& field = "schedule");
/// The config spelling of a schedule kind.
std::string to_string(ScheduleKind kind);

/// Settings of a schedule.
struct LrScheduleOptions {
  TORCH_ARG(ScheduleKind, kind) = ScheduleKind::kWarmupCosine;
  /// The peak learning rate (the plan's lr after its scaling rule).
  TORCH_ARG(double, peak_lr) = 4e-3;
  /// Optimizer steps of linear warmup.
  TORCH_ARG(int64_t, warmup_steps) = 20;
  /// Optimizer steps in the whole run; the cosine ends here.
  TORCH_ARG(int64_t, total_steps) = 1;
  /// The final lr as a fraction of the peak.
  TORCH_ARG(double, min_lr_ratio) = 0.1;
};

/// A learning-rate schedule indexed by optimizer step. It holds no position of its own, so it
/// cannot drift from the optimizer: the accumulator asks for lr_at(step) once per optimizer step.
///
/// warmup_cosine, with s the 0-based optimizer step, W warmup_steps, S total_steps, m min_lr_ratio:
///   s <  W:  peak * (s + 1) / W
///   s >= W:  peak * (m + (1 - m) * 0.5 * (1 + cos(pi * min(1, (s - W) / max(1, S - W)))))
class LrSchedule {
 public:
  /// Validates the options (throws InputError naming the field and value).
  explicit LrSchedule(const LrScheduleOptions& options);
  /// The learning rate of optimizer step `step` (0-based).
  double lr_at(int64_t step) const;
  /// The options this schedule was built from.
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
};

}  // namespace bigbatch::engine
