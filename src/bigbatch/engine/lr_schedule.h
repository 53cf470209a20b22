// Learning-rate schedules as pure functions of the optimizer step.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch::engine {

/// The shape of the learning rate over training.
enum class ScheduleKind {
  kConstant,        ///< the peak lr throughout (no warmup)
  kWarmupCosine,    ///< linear warmup to the peak, then a half cosine down to min_lr_ratio * peak
  kWarmupLinear,    ///< linear warmup to the peak, then a straight line down to min_lr_ratio * peak
  kWarmupConstant,  ///< linear warmup to the peak, then the peak
};

/// Parses "constant" | "warmup_cosine" | "warmup_linear" | "warmup_constant"; throws InputError
/// naming `field` otherwise.
ScheduleKind parse_schedule_kind(const std::string& text, const std::string& field = "schedule");
/// The config spelling of a schedule kind.
std::string to_string(ScheduleKind kind);
/// Every kind's config spelling, in declaration order.
std::vector<std::string> schedule_kind_names();

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

/// The shape in words, for the plan: "20 warmup steps, then a half cosine to lr x 0.1".
std::string describe(const LrScheduleOptions& options);

/// A learning-rate schedule indexed by optimizer step. It holds no position of its own, so it
/// cannot drift from the optimizer: the accumulator asks for lr_at(step) once per optimizer step.
///
/// With s the 0-based optimizer step, W warmup_steps, S total_steps, m min_lr_ratio and
/// p = min(1, (s - W) / max(1, S - W)), every warmup_* kind is
///   s <  W:  peak * (s + 1) / W
/// and after the warmup
///   warmup_cosine:    peak * (m + (1 - m) * 0.5 * (1 + cos(pi * p)))
///   warmup_linear:    peak * (m + (1 - m) * (1 - p))
///   warmup_constant:  peak
/// warmup_linear with m = 0 is transformers' get_linear_schedule_with_warmup from s = W on; its
/// warmup starts at 0 and reaches the peak at s = W instead of W - 1.
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
