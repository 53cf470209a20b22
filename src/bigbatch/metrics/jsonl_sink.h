// Metrics as JSON lines: one object per optimizer step and per evaluation.
#pragma once

#include <cstdint>
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
  /// Opens `path`: created or truncated, or with `append` created or continued (a resumed run
  /// continues its metrics). Throws std::runtime_error naming it on failure.
  explicit JsonlSink(const std::string& path, bool append = false);
  /// Bytes written to the file so far, the part before opening included (the length a resumed
  /// run cuts the file back to).
  int64_t bytes() const { return bytes_; }
  void on_window(const WindowRecord& record) override;
  void on_eval(const EvalRecord& record) override;
  void on_notice(const std::string& message) override;

 private:
  void write_line(const std::string& line);
  std::string path_;
  std::ofstream out_;
  int64_t bytes_ = 0;
};

}  // namespace bigbatch::metrics
