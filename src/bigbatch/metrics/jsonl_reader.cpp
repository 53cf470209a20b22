#include "bigbatch/metrics/jsonl_reader.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"
#include "bigbatch/metrics/record_json.h"

namespace bigbatch::metrics {

using nlohmann::json;

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
        history.windows.push_back(window_from_json(parsed));
      else if (type == "eval")
        history.evals.push_back(eval_from_json(parsed));
      else if (type == "notice")
        history.notices.push_back(parsed.value("message", std::string()));
    } catch (const json::exception& error) {
      throw InputError(cat(source, " line ", number_of_line, ": ", error.what()));
    }
  }
  return history;
}

}  // namespace bigbatch::metrics
