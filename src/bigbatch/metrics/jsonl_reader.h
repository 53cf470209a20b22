// Reading metrics.jsonl back: the records a JsonlSink wrote, for charts and comparisons.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bigbatch/metrics/sink.h"

namespace bigbatch::metrics {

/// What a metrics.jsonl holds, in the order it was written.
struct MetricsHistory {
  std::vector<WindowRecord> windows;  ///< "type":"window" lines, skipped windows included
  std::vector<EvalRecord> evals;      ///< "type":"eval" lines
  std::vector<std::string> notices;   ///< "type":"notice" messages
};

/// Parses the lines JsonlSink writes (see jsonl_sink.h); `source` names the file in errors. A
/// null or missing number reads as NaN (the loss of a skipped window), a missing count as 0, and
/// lines of other types are passed over. An unfinished last line (no newline: a run killed while
/// writing it) is ignored; any other line that is not a JSON object throws InputError naming
/// `source` and the line number.
MetricsHistory parse_metrics_jsonl(std::string_view text, const std::string& source);

}  // namespace bigbatch::metrics
