#include "bigbatch/engine/summary_json.h"

#include <cmath>
#include <limits>

namespace bigbatch::engine {
namespace {

using json = nlohmann::json;

/// NaN and infinities as null (JSON has no such numbers).
json number(double value) {
  return std::isfinite(value) ? json(value) : json(nullptr);
}

double number_from(const json& value, double if_null) {
  return value.is_null() ? if_null : value.get<double>();
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

json to_json(const TrainSummary& s) {
  return {{"steps", s.steps},
          {"skipped_steps", s.skipped_steps},
          {"final_loss_scale", s.final_loss_scale > 0 ? json(s.final_loss_scale) : json(nullptr)},
          {"epochs_started", s.epochs_started},
          {"last_train_loss", number(s.last_train_loss)},
          {"first_val_loss", number(s.first_val_loss)},
          {"last_val_loss", number(s.last_val_loss)},
          {"last_val_accuracy", s.last_val_accuracy ? json(*s.last_val_accuracy) : json(nullptr)},
          {"samples", s.samples},
          {"tokens", s.tokens},
          {"seconds", s.seconds},
          {"train_seconds", s.train_seconds},
          {"peak_bytes", s.peak_bytes},
          {"final_micro_batch", s.final_micro_batch}};
}

TrainSummary summary_from_json(const json& j) {
  TrainSummary s;
  s.steps = j.at("steps").get<int64_t>();
  s.skipped_steps = j.at("skipped_steps").get<int64_t>();
  s.final_loss_scale = number_from(j.at("final_loss_scale"), 0.0);
  s.epochs_started = j.at("epochs_started").get<int64_t>();
  s.last_train_loss = number_from(j.at("last_train_loss"), kNaN);
  s.first_val_loss = number_from(j.at("first_val_loss"), kNaN);
  s.last_val_loss = number_from(j.at("last_val_loss"), kNaN);
  if (!j.at("last_val_accuracy").is_null())
    s.last_val_accuracy = j.at("last_val_accuracy").get<double>();
  s.samples = j.at("samples").get<int64_t>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.seconds = j.at("seconds").get<double>();
  s.train_seconds = j.at("train_seconds").get<double>();
  s.peak_bytes = j.at("peak_bytes").get<int64_t>();
  s.final_micro_batch = j.at("final_micro_batch").get<int64_t>();
  return s;
}

}  // namespace bigbatch::engine
