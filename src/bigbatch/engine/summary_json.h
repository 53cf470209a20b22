// The one JSON schema of TrainSummary: checkpoints and summary.json both write it through these.
#pragma once

#include <nlohmann/json.hpp>

#include "bigbatch/engine/trainer.h"

namespace bigbatch::engine {

/// Every field of the summary except `stopped`. NaN losses, a missing accuracy and a
/// final_loss_scale of 0 (no loss scaler) are null.
nlohmann::json to_json(const TrainSummary& summary);

/// Reads what to_json writes (null reads back as NaN, no accuracy, or 0 for final_loss_scale).
/// Throws nlohmann::json::exception for a missing field or one of the wrong type.
TrainSummary summary_from_json(const nlohmann::json& json);

}  // namespace bigbatch::engine
