// The one JSON schema of the metrics records: metrics.jsonl's lines are written and read back
// through these, and nothing else spells the fields.
#pragma once

#include <nlohmann/json.hpp>

#include "bigbatch/metrics/sink.h"

namespace bigbatch::metrics {

/// {"type": "window", "step": ..., ...}: every field of the record; the data-parallel fields
/// (world_size, comm_*) only when world_size > 1. Non-finite numbers become null.
nlohmann::json to_json(const WindowRecord& record);
/// Reads what to_json(WindowRecord) writes. A missing or null number reads as NaN (a count as
/// 0), a missing flag as false, a missing world_size as 1. Throws nlohmann::json::exception
/// for a field of the wrong type.
WindowRecord window_from_json(const nlohmann::json& line);

/// {"type": "eval", "step": ..., "loss": ..., ...}; "accuracy" only when the record has one.
nlohmann::json to_json(const EvalRecord& record);
/// Reads what to_json(EvalRecord) writes, with window_from_json's rules for missing fields.
EvalRecord eval_from_json(const nlohmann::json& line);

}  // namespace bigbatch::metrics
