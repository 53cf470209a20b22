#include "bigbatch/models/peft_adapter.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/nn/lora.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

/// The prefix PEFT gives every tensor of a saved adapter.
const char* const kPeftPrefix = "base_model.model.";

/// adapter_config.json of `directory`, parsed; InputError naming the file otherwise.
Json read_adapter_config(const std::string& directory) {
  const std::string path = (fs::path(directory) / "adapter_config.json").string();
  const Json config = Json::parse(io::read_file(path), nullptr, /*allow_exceptions=*/false);
  BB_CHECK_INPUT(config.is_object(), path, " is not a JSON object");
  return config;
}

/// config[key], or null when it is absent.
Json field(const Json& config, const std::string& key) {
  return config.contains(key) ? config[key] : Json();
}

/// Throws InputError, naming `path` and `key`, unless config[key] is absent, null, false or empty
/// (a PEFT feature bigbatch does not implement being off).
void require_off(const Json& config, const std::string& key, const std::string& path) {
  const Json value = field(config, key);
  const bool off = value.is_null() || value == false || (value.is_object() && value.empty()) ||
                   (value.is_array() && value.empty());
  BB_CHECK_INPUT(off, path, ": ", key, " = ", value.dump(), " is not supported (bigbatch reads ",
                 "plain LoRA adapters)");
}

/// The names of the AdaptedLinears of `module` that target_modules names: a list as PEFT matches
/// it (the whole name or its last components), or a regular expression over whole names.
std::vector<std::string> target_names(torch::nn::Module& module, const Json& targets,
                                      const std::string& path) {
  std::vector<std::string> names;
  if (targets.is_array()) {
    for (const Json& target : targets) {
      BB_CHECK_INPUT(target.is_string(), path, ": target_modules must hold strings, got ",
                     target.dump());
      names.push_back(target.get<std::string>());
    }
    return names;
  }
  BB_CHECK_INPUT(targets.is_string(), path,
                 ": target_modules must be a list of module names or a regular expression, got ",
                 targets.dump());
  std::regex pattern;
  try {
    pattern = std::regex(targets.get<std::string>());
  } catch (const std::regex_error& error) {
    throw InputError(cat(path, ": target_modules ", targets.dump(),
                         " is not a regular expression bigbatch can read: ", error.what()));
  }
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    if (item.value()->as<nn::AdaptedLinear>() != nullptr && std::regex_match(item.key(), pattern))
      names.push_back(item.key());
  }
  BB_CHECK_INPUT(!names.empty(), path, ": target_modules ", targets.dump(),
                 " matches no linear layer of the model");
  return names;
}

}  // namespace

bool is_peft_adapter(const std::string& directory) {
  const fs::path dir(directory);
  return fs::is_regular_file(dir / "adapter_config.json") && !fs::exists(dir / "config.json");
}

std::string peft_base_model(const std::string& directory, const std::string& base) {
  if (!base.empty())
    return base;
  const std::string path = (fs::path(directory) / "adapter_config.json").string();
  const Json named = field(read_adapter_config(directory), "base_model_name_or_path");
  BB_CHECK_INPUT(named.is_string() && !named.get<std::string>().empty(), path,
                 " names no base_model_name_or_path; give the base model directory with --base");
  const std::string base_path = named.get<std::string>();
  BB_CHECK_INPUT(fs::is_directory(base_path), path, ": base_model_name_or_path \"", base_path,
                 "\" is not a directory here; give the base model directory with --base");
  return base_path;
}

PeftLoraConfig read_peft_lora_config(const std::string& directory) {
  PeftLoraConfig result;
  result.path = (fs::path(directory) / "adapter_config.json").string();
  const std::string& config_path = result.path;
  const Json config = read_adapter_config(directory);
  BB_CHECK_INPUT(field(config, "peft_type") == "LORA", config_path, ": peft_type ",
                 field(config, "peft_type").dump(), " is not supported (bigbatch reads \"LORA\")");
  // Variants that change what a layer computes; initialisation methods (loftq, eva, corda) do
  // not, their result being the saved weights.
  for (const char* key :
       {"use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform", "layer_replication",
        "lora_bias", "trainable_token_indices", "target_parameters", "exclude_modules",
        "use_qalora", "use_bdlora", "alora_invocation_tokens", "arrow_config", "kasa_config",
        "monteclora_config", "megatron_config"})
    require_off(config, key, config_path);
  const Json bias = field(config, "bias");
  BB_CHECK_INPUT(bias.is_null() || bias == "none", config_path, ": bias = ", bias.dump(),
                 " is not supported (bigbatch reads adapters with bias \"none\")");
  const Json rank = field(config, "r");
  const Json alpha = field(config, "lora_alpha");
  BB_CHECK_INPUT(rank.is_number_integer() && rank.get<int64_t>() >= 1 && alpha.is_number(),
                 config_path,
                 ": r must be a positive integer and lora_alpha a number, got r = ", rank.dump(),
                 ", lora_alpha = ", alpha.dump());
  result.rank = rank.get<int64_t>();
  // use_rslora scales by alpha / sqrt(r): an alpha of alpha * sqrt(r) gives that as alpha' / r.
  const bool rslora = field(config, "use_rslora") == true;
  result.alpha = alpha.get<double>() * (rslora ? std::sqrt(static_cast<double>(result.rank)) : 1.0);
  result.target_modules = field(config, "target_modules");
  const Json saved = field(config, "modules_to_save");
  BB_CHECK_INPUT(saved.is_null() || saved.is_array(), config_path,
                 ": modules_to_save must be a list or null, got ", saved.dump());
  for (const Json& name : saved.is_array() ? saved : Json::array()) {
    BB_CHECK_INPUT(name.is_string(), config_path, ": modules_to_save must hold strings, got ",
                   name.dump());
    result.modules_to_save.push_back(name.get<std::string>());
  }
  result.weights_path = (fs::path(directory) / "adapter_model.safetensors").string();
  BB_CHECK_INPUT(fs::is_regular_file(result.weights_path), directory,
                 " holds no adapter_model.safetensors (bigbatch reads adapters saved as "
                 "safetensors, PEFT's default)");
  return result;
}

std::vector<std::string> peft_targets(torch::nn::Module& module, const PeftLoraConfig& config) {
  return target_names(module, config.target_modules, config.path);
}

void load_peft_weights(torch::nn::Module& module, const std::vector<std::string>& adapted,
                       const PeftLoraConfig& config) {
  const io::Safetensors weights = io::read_safetensors(config.weights_path);
  const std::string& weights_path = config.weights_path;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  const auto copy_in = [&](const std::string& name, torch::Tensor destination) {
    const std::string file_name = kPeftPrefix + name;
    const torch::Tensor* source = weights.find(file_name);
    BB_CHECK_INPUT(source != nullptr, weights_path, " lacks \"", file_name, "\"");
    BB_CHECK_INPUT(source->sizes() == destination.sizes(), weights_path, ": \"", file_name,
                   "\" has shape ", source->sizes(), " but the model's has shape ",
                   destination.sizes());
    destination.copy_(*source);
    used.insert(file_name);
  };
  const auto modules = module.named_modules();
  for (const std::string& name : adapted) {
    auto* layer = modules[name]->as<nn::AdaptedLinear>();
    copy_in(name + ".lora_A.weight", layer->lora_A);
    copy_in(name + ".lora_B.weight", layer->lora_B);
  }
  // The rest are modules saved whole (modules_to_save: a classifier head).
  std::map<std::string, torch::Tensor> state;  // the model's parameters and buffers, by name
  for (const auto& item : module.named_parameters())
    state.emplace(item.key(), item.value());
  for (const auto& item : module.named_buffers())
    state.emplace(item.key(), item.value());
  for (const auto& [file_name, tensor] : weights.tensors) {
    if (used.count(file_name) != 0)
      continue;
    BB_CHECK_INPUT(starts_with(file_name, kPeftPrefix), weights_path, ": tensor \"", file_name,
                   "\" does not start with \"", kPeftPrefix, "\" as PEFT names them");
    const std::string name = file_name.substr(std::string(kPeftPrefix).size());
    const auto found = state.find(name);
    BB_CHECK_INPUT(found != state.end(), weights_path, ": the model has no place for \"", file_name,
                   "\"");
    copy_in(name, found->second);
  }
}

std::vector<std::string> apply_peft_lora(torch::nn::Module& module, const PeftLoraConfig& config,
                                         nn::LoraOptions options, const std::string& base) {
  options.rank(config.rank).alpha(config.alpha).targets(peft_targets(module, config));
  try {
    return nn::apply_lora(module, options);
  } catch (const InputError& error) {  // the adapter is for another model
    std::string what = error.what();
    const std::string option = "LoraOptions.targets: ";
    throw InputError(cat(config.path, ": target_modules do not fit the base model ", base, ": ",
                         starts_with(what, option) ? what.substr(option.size()) : what));
  }
}

HfModel load_hf_model_with_peft_adapter(const std::string& directory, const std::string& base) {
  const PeftLoraConfig config = read_peft_lora_config(directory);
  // A classifier gets the classes of its saved head: BERT's and DistilBERT's classifier,
  // RoBERTa's and ELECTRA's classifier.out_proj.
  int64_t num_labels = 0;
  {
    const io::Safetensors weights = io::map_safetensors(config.weights_path);
    for (const char* output : {"classifier.weight", "classifier.out_proj.weight"}) {
      if (const torch::Tensor* head = weights.find(std::string(kPeftPrefix) + output))
        num_labels = head->size(0);
    }
  }
  const std::string base_directory = peft_base_model(directory, base);
  HfModel model = load_hf_model(base_directory, num_labels);
  const std::vector<std::string> adapted =
      apply_peft_lora(*model.module(), config, nn::LoraOptions(), base_directory);
  load_peft_weights(*model.module(), adapted, config);
  return model;
}

}  // namespace bigbatch::models
