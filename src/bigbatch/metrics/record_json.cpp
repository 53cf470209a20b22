#include "bigbatch/metrics/record_json.h"

#include <cmath>
#include <string>

namespace bigbatch::metrics {
namespace {

using nlohmann::json;

/// Calls visit(key, field) for every field written for any run, in one list for both
/// directions.
template <typename Record, typename Visit>
void window_fields(Record& r, Visit&& visit) {
  visit("step", r.step);
  visit("total_steps", r.total_steps);
  visit("epoch", r.epoch);
  visit("loss", r.loss);
  visit("lr", r.lr);
  visit("grad_norm", r.grad_norm);
  visit("clipped", r.clipped);
  visit("samples", r.samples);
  visit("tokens", r.tokens);
  visit("micro_batches", r.micro_batches);
  visit("micro_batch", r.micro_batch);
  visit("peak_bytes", r.peak_bytes);
  visit("step_seconds", r.step_seconds);
  visit("elapsed_seconds", r.elapsed_seconds);
  visit("samples_per_second", r.samples_per_second);
  visit("tokens_per_second", r.tokens_per_second);
  visit("skipped", r.skipped);
  visit("skip_reason", r.skip_reason);
  visit("skipped_steps", r.skipped_steps);
  visit("loss_scale", r.loss_scale);
}

/// The fields of a data-parallel window (world_size > 1).
template <typename Record, typename Visit>
void window_comm_fields(Record& r, Visit&& visit) {
  visit("world_size", r.world_size);
  visit("comm_calls", r.comm_calls);
  visit("comm_bytes", r.comm_bytes);
  visit("gradient_bytes", r.gradient_bytes);
  visit("comm_seconds", r.comm_seconds);
  visit("comm_hidden_seconds", r.comm_hidden_seconds);
}

template <typename Record, typename Visit>
void eval_fields(Record& r, Visit&& visit) {
  visit("step", r.step);
  visit("loss", r.loss);
  visit("samples", r.samples);
  visit("tokens", r.tokens);
  visit("seconds", r.seconds);
}

/// Writes each visited field into `out`.
struct Writer {
  json& out;
  template <typename T>
  void operator()(const char* key, const T& value) const {
    out[key] = value;
  }
};

/// Reads each visited field from `line`, leaving missing ones at their defaults.
struct Reader {
  const json& line;
  void operator()(const char* key, int64_t& value) const {
    const auto found = line.find(key);
    value = found != line.end() && found->is_number() ? found->get<int64_t>() : 0;
  }
  void operator()(const char* key, double& value) const {
    const auto found = line.find(key);
    value = found != line.end() && found->is_number() ? found->get<double>() : NAN;
  }
  void operator()(const char* key, bool& value) const { value = line.value(key, false); }
  void operator()(const char* key, std::string& value) const {
    value = line.value(key, std::string());
  }
};

}  // namespace

json to_json(const WindowRecord& record) {
  json line = {{"type", "window"}};
  window_fields(record, Writer{line});
  if (record.world_size > 1)
    window_comm_fields(record, Writer{line});
  return line;
}

WindowRecord window_from_json(const json& line) {
  WindowRecord record;
  window_fields(record, Reader{line});
  if (line.contains("world_size"))
    window_comm_fields(record, Reader{line});
  return record;
}

json to_json(const EvalRecord& record) {
  json line = {{"type", "eval"}};
  eval_fields(record, Writer{line});
  if (record.accuracy)
    line["accuracy"] = *record.accuracy;
  return line;
}

EvalRecord eval_from_json(const json& line) {
  EvalRecord record;
  eval_fields(record, Reader{line});
  const auto accuracy = line.find("accuracy");
  if (accuracy != line.end() && accuracy->is_number())
    record.accuracy = accuracy->get<double>();
  return record;
}

}  // namespace bigbatch::metrics
