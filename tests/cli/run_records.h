// Reading the JSON-lines records of a run: bigbatch's metrics.jsonl, or bench/peer.py's output.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bigbatch {

/// The records of one type ("window", "eval", "summary") of a JSON-lines file, in order.
inline std::vector<nlohmann::json> json_line_records(const std::string& path,
                                                     const std::string& type) {
  std::vector<nlohmann::json> found;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("type", "") == type)
      found.push_back(record);
  }
  return found;
}

/// The records of one type of a run directory's metrics.jsonl.
inline std::vector<nlohmann::json> records(const std::string& run_dir, const std::string& type) {
  return json_line_records(run_dir + "/metrics.jsonl", type);
}

/// The losses of the "window" records of a JSON-lines file, in order.
inline std::vector<double> json_line_losses(const std::string& path) {
  std::vector<double> losses;
  for (const nlohmann::json& window : json_line_records(path, "window"))
    losses.push_back(window["loss"].get<double>());
  return losses;
}

/// The losses of a run's windows, in order.
inline std::vector<double> window_losses(const std::string& run_dir) {
  return json_line_losses(run_dir + "/metrics.jsonl");
}

}  // namespace bigbatch
