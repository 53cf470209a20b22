#include "bigbatch/metrics/jsonl_sink.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bigbatch/metrics/record_json.h"

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
  write_line(to_json(r).dump());
}

void JsonlSink::on_eval(const EvalRecord& r) {
  write_line(to_json(r).dump());
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
