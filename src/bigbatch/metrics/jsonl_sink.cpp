#include "bigbatch/metrics/jsonl_sink.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace bigbatch::metrics {

JsonlSink::JsonlSink(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) {
    throw std::runtime_error("cannot write metrics file " + path + ": " + std::strerror(errno));
  }
  out_.seekp(0, std::ios::end);
  bytes_ = static_cast<int64_t>(out_.tellp());
}

void JsonlSink::on_window(const WindowRecord& r) {
  const nlohmann::json line = {{"type", "window"},
                               {"step", r.step},
                               {"total_steps", r.total_steps},
                               {"epoch", r.epoch},
                               {"loss", r.loss},
                               {"lr", r.lr},
                               {"grad_norm", r.grad_norm},
                               {"clipped", r.clipped},
                               {"samples", r.samples},
                               {"tokens", r.tokens},
                               {"micro_batches", r.micro_batches},
                               {"micro_batch", r.micro_batch},
                               {"peak_bytes", r.peak_bytes},
                               {"step_seconds", r.step_seconds},
                               {"elapsed_seconds", r.elapsed_seconds},
                               {"samples_per_second", r.samples_per_second},
                               {"tokens_per_second", r.tokens_per_second},
                               {"skipped", r.skipped},
                               {"skip_reason", r.skip_reason},
                               {"skipped_steps", r.skipped_steps},
                               {"loss_scale", r.loss_scale}};
  if (r.world_size == 1) {
    write_line(line.dump());
    return;
  }
  nlohmann::json with_comm = line;
  with_comm["world_size"] = r.world_size;
  with_comm["comm_calls"] = r.comm_calls;
  with_comm["comm_bytes"] = r.comm_bytes;
  with_comm["gradient_bytes"] = r.gradient_bytes;
  with_comm["comm_seconds"] = r.comm_seconds;
  with_comm["comm_hidden_seconds"] = r.comm_hidden_seconds;
  write_line(with_comm.dump());
}

void JsonlSink::on_eval(const EvalRecord& r) {
  const nlohmann::json line = {{"type", "eval"},     {"step", r.step},
                               {"loss", r.loss},     {"samples", r.samples},
                               {"tokens", r.tokens}, {"seconds", r.seconds}};
  nlohmann::json with_accuracy = line;
  if (r.accuracy)
    with_accuracy["accuracy"] = *r.accuracy;
  write_line(with_accuracy.dump());
}

void JsonlSink::on_notice(const std::string& message) {
  write_line(nlohmann::json{{"type", "notice"}, {"message", message}}.dump());
}

void JsonlSink::write_line(const std::string& line) {
  out_ << line << '\n';
  out_.flush();
  bytes_ += static_cast<int64_t>(line.size()) + 1;
  if (!out_)
    throw std::runtime_error("failed writing metrics file " + path_);
}

}  // namespace bigbatch::metrics
