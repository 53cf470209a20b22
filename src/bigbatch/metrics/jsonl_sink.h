// Metrics as JSON lines: one object per optimizer step and per evaluation.
#pragma once

#include <fstream>
#include <string>

#include "bigbatch/metrics/sink.h"

namespace bigbatch::metrics {

/// Appends one JSON object per line to a file, flushed as it goes, so a crashed run keeps its
/// history. Window lines have "type":"window" and every WindowRecord field (a non-finite loss of a
/// skipped window is written as null); evaluation lines have "type":"eval" and every EvalRecord
/// field; notices have "type":"notice" and "message".
class JsonlSink : public MetricsSink {
 public:
  /// Opens (creates or truncates) `path`; throws std::runtime_error naming it on failure.
  explicit JsonlSink(const std::string& path);
  void on_window(const WindowRecord& record) override;
  void on_eval(const EvalRecord& record) override;
  void on_notice(const std::string& message) override;

 private:
  void write_line(const std::string& line);
  std::string path_;
  std::ofstream out_;
};

}  // namespace bigbatch::metrics
