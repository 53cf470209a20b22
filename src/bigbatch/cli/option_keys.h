// The config keys of the library's Options fields: library errors name the field
// ("BatchOptions.micro_batch = 128 ..."); the command line shows the key the user wrote
// ("batch.micro_batch = 128 ...").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bigbatch::cli {

/// Each Options field that a `bigbatch train` key sets, with that key, for example
/// {"TrainerOptions.total_steps", "train.steps"}.
const std::vector<std::pair<std::string, std::string>>& option_keys();

/// `message` with every name of `names` (first) replaced by its second, where the name is not
/// the start of a longer one ("LoraOptions.rank" is not replaced in "LoraOptions.ranks").
std::string with_names_replaced(std::string message,
                                const std::vector<std::pair<std::string, std::string>>& names);

/// `message` with every Options field of option_keys() replaced by its config key.
std::string with_config_keys(std::string message);

}  // namespace bigbatch::cli
