#include "bigbatch/metrics/jsonl_reader.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"

namespace bigbatch::metrics {

namespace {

using nlohmann::json;

double number(const json& line, const char* key) {
  const auto found = line.find(key);
  return found != line.end() && found->is_number() ? found->get<double>() : NAN;
}

int64_t count(const json& line, const char* key) {
  const auto found = line.find(key);
  return found != line.end() && found->is_number() ? found->get<int64_t>() : 0;
}

WindowRecord window_of(const json& line) {
  WindowRecord r;
  r.step = count(line, "step");
  r.total_steps = count(line, "total_steps");
  r.epoch = count(line, "epoch");
  r.loss = number(line, "loss");
  r.lr = number(line, "lr");
  r.grad_norm = number(line, "grad_norm");
  r.clipped = line.value("clipped", false);
  r.samples = count(line, "samples");
  r.tokens = count(line, "tokens");
  r.micro_batches = count(line, "micro_batches");
  r.peak_bytes = count(line, "peak_bytes");
  r.micro_batch = count(line, "micro_batch");
  r.step_seconds = number(line, "step_seconds");
  r.elapsed_seconds = number(line, "elapsed_seconds");
  r.samples_per_second = number(line, "samples_per_second");
  r.tokens_per_second = number(line, "tokens_per_second");
  r.skipped = line.value("skipped", false);
  r.skip_reason = line.value("skip_reason", std::string());
  r.skipped_steps = count(line, "skipped_steps");
  r.loss_scale = number(line, "loss_scale");
  r.world_size = line.contains("world_size") ? count(line, "world_size") : 1;
  r.comm_calls = count(line, "comm_calls");
  r.comm_bytes = count(line, "comm_bytes");
  r.gradient_bytes = count(line, "gradient_bytes");
  if (r.world_size > 1) {
    r.comm_seconds = number(line, "comm_seconds");
    r.comm_hidden_seconds = number(line, "comm_hidden_seconds");
  }
  return r;
}

EvalRecord eval_of(const json& line) {
  EvalRecord r;
  r.step = count(line, "step");
  r.loss = number(line, "loss");
  r.samples = count(line, "samples");
  r.tokens = count(line, "tokens");
  r.seconds = number(line, "seconds");
  if (line.contains("accuracy") && line["accuracy"].is_number())
    r.accuracy = line["accuracy"].get<double>();
  return r;
}

}  // namespace

MetricsHistory parse_metrics_jsonl(std::string_view text, const std::string& source) {
  MetricsHistory history;
  size_t start = 0;
  for (int64_t number_of_line = 1; start < text.size(); ++number_of_line) {
    const size_t end = text.find('\n', start);
    const bool finished = end != std::string_view::npos;
    const std::string_view line = text.substr(start, finished ? end - start : std::string::npos);
    start = finished ? end + 1 : text.size();
    if (line.empty())
      continue;
    const json parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) {
      if (!finished)
        break;  // the line a killed run was writing
      throw InputError(cat(source, " line ", number_of_line,
                           " is not a JSON object: not a bigbatch metrics file, or damaged"));
    }
    const std::string type = parsed.value("type", std::string());
    try {
      if (type == "window")
        history.windows.push_back(window_of(parsed));
      else if (type == "eval")
        history.evals.push_back(eval_of(parsed));
      else if (type == "notice")
        history.notices.push_back(parsed.value("message", std::string()));
    } catch (const json::exception& error) {
      throw InputError(cat(source, " line ", number_of_line, ": ", error.what()));
    }
  }
  return history;
}

}  // namespace bigbatch::metrics
