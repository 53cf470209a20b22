#include "bigbatch/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "bigbatch/core/check.h"

namespace bigbatch::engine {

ScheduleKind parse_schedule_kind(const std::string& text, const std::string& field) {
  if (text == "constant")
    return ScheduleKind::kConstant;
  if (text == "warmup_cosine")
    return ScheduleKind::kWarmupCosine;
  throw InputError(cat(field, " = \"", text,
                       "\" is not a schedule; expected \"constant\" or \"warmup_cosine\""));
}

std::string to_string(ScheduleKind kind) {
  return kind == ScheduleKind::kConstant ? "constant" : "warmup_cosine";
}

LrSchedule::LrSchedule(const LrScheduleOptions& options) : options_(options) {
  BB_CHECK_INPUT(std::isfinite(options.peak_lr()) && options.peak_lr() > 0,
                 "schedule peak lr = ", options.peak_lr(), " must be positive and finite");
  BB_CHECK_INPUT(options.warmup_steps() >= 0,
                 "LrScheduleOptions.warmup_steps = ", options.warmup_steps(), " must be >= 0");
  BB_CHECK_INPUT(options.total_steps() >= 1, "schedule total steps = ", options.total_steps(),
                 " must be >= 1");
  BB_CHECK_INPUT(options.min_lr_ratio() >= 0 && options.min_lr_ratio() <= 1,
                 "LrScheduleOptions.min_lr_ratio = ", options.min_lr_ratio(), " must be in [0, 1]");
}

double LrSchedule::lr_at(int64_t step) const {
  const double peak = options_.peak_lr();
  if (options_.kind() == ScheduleKind::kConstant)
    return peak;
  const int64_t warmup = options_.warmup_steps();
  if (step < warmup) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, options_.total_steps() - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double ratio = options_.min_lr_ratio();
  return peak * (ratio + (1.0 - ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace bigbatch::engine
