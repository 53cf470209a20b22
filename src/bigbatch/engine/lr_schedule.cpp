#include "bigbatch/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"

namespace bigbatch::engine {

namespace {

const std::vector<std::pair<ScheduleKind, std::string>>& schedule_names() {
  static const std::vector<std::pair<ScheduleKind, std::string>> names = {
      {ScheduleKind::kConstant, "constant"},
      {ScheduleKind::kWarmupCosine, "warmup_cosine"},
      {ScheduleKind::kWarmupLinear, "warmup_linear"},
      {ScheduleKind::kWarmupConstant, "warmup_constant"},
  };
  return names;
}

}  // namespace

std::vector<std::string> schedule_kind_names() {
  std::vector<std::string> names;
  for (const auto& [kind, name] : schedule_names())
    names.push_back(name);
  return names;
}

ScheduleKind parse_schedule_kind(const std::string& text, const std::string& field) {
  std::vector<std::string> expected;
  for (const auto& [kind, name] : schedule_names()) {
    if (text == name)
      return kind;
    expected.push_back("\"" + name + "\"");
  }
  throw InputError(
      cat(field, " = \"", text, "\" is not a schedule; expected one of ", join(expected, ", ")));
}

std::string to_string(ScheduleKind kind) {
  for (const auto& [known, name] : schedule_names()) {
    if (known == kind)
      return name;
  }
  return "?";
}

std::string describe(const LrScheduleOptions& options) {
  const std::string after = cat(options.warmup_steps(), " warmup steps, then ");
  switch (options.kind()) {
    case ScheduleKind::kConstant:
      return "the peak lr from the first step (no warmup)";
    case ScheduleKind::kWarmupConstant:
      return after + "the peak lr";
    case ScheduleKind::kWarmupLinear:
      return cat(after, "a straight line to lr x ", options.min_lr_ratio());
    case ScheduleKind::kWarmupCosine:
      break;
  }
  return cat(after, "a half cosine to lr x ", options.min_lr_ratio());
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
  if (options_.kind() == ScheduleKind::kWarmupConstant)
    return peak;
  const double span = static_cast<double>(std::max<int64_t>(1, options_.total_steps() - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double ratio = options_.min_lr_ratio();
  const double falling = options_.kind() == ScheduleKind::kWarmupLinear
                             ? 1.0 - progress
                             : 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak * (ratio + (1.0 - ratio) * falling);
}

}  // namespace bigbatch::engine
