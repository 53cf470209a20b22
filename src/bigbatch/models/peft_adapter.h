// Reading a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) onto its
// base model: what `bigbatch export --format peft` writes and what Python's PEFT saves.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/models/hf_model.h"
#include "bigbatch/nn/lora.h"

namespace bigbatch::models {

/// Whether `directory` is a PEFT adapter: it holds adapter_config.json and no config.json.
bool is_peft_adapter(const std::string& directory);

/// The base model directory of the adapter in `directory`: `base` when it is not empty, else
/// adapter_config.json's base_model_name_or_path. Throws InputError naming the field and `--base`
/// when that is not a local directory (a hub name, or a path from another machine).
std::string peft_base_model(const std::string& directory, const std::string& base = "");

/// What adapter_config.json of a PEFT LoRA adapter says, checked (see
/// load_hf_model_with_peft_adapter for what is refused).
struct PeftLoraConfig {
  std::string path;          ///< the adapter_config.json
  std::string weights_path;  ///< the adapter_model.safetensors beside it (checked to exist)
  int64_t rank = 0;          ///< r
  double alpha = 0;          ///< for LoraOptions.alpha: lora_alpha, times sqrt(r) with use_rslora
  nlohmann::json target_modules;             ///< a list of names, or a regular expression
  std::vector<std::string> modules_to_save;  ///< modules saved whole
};

/// Reads and checks the adapter_config.json of `directory`; InputError naming it and the field.
PeftLoraConfig read_peft_lora_config(const std::string& directory);

/// The names of `module`'s AdaptedLinears that config.target_modules names: a list as given
/// (LoraOptions.targets matches it as PEFT does), a regular expression resolved to the whole
/// names it matches. InputError when the expression is invalid or matches nothing.
std::vector<std::string> peft_targets(torch::nn::Module& module, const PeftLoraConfig& config);

/// nn::apply_lora of `options` with the adapter's rank, alpha and targets; targets that do not fit
/// `module` are an InputError naming the adapter's config and `base` (the base model's directory).
/// Returns the adapted modules' names.
std::vector<std::string> apply_peft_lora(torch::nn::Module& module, const PeftLoraConfig& config,
                                         nn::LoraOptions options, const std::string& base);

/// Copies the adapter's weights into the adapters of the `adapted` modules of `module`, and every
/// other tensor of its file (modules saved whole) into the tensor of that name. InputError naming
/// the file for a missing, mis-shaped or unplaced tensor.
void load_peft_weights(torch::nn::Module& module, const std::vector<std::string>& adapted,
                       const PeftLoraConfig& config);

/// The base model (peft_base_model) with the adapter of `directory`: a LoRA adapter on every
/// module that target_modules names (a list matched as LoraOptions.targets, or a regular
/// expression matched against whole module names, as PEFT does), of rank r and scale
/// lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), with the file's weights, and the
/// modules_to_save tensors (a classifier's) copied in; a classifier gets as many classes as the
/// saved classifier has. Every parameter is frozen. Throws InputError naming the file and what
/// is wrong: a missing file, a peft_type other than LORA, DoRA, trained biases, rank or alpha
/// patterns, layers_to_transform, a tensor the model has no place for, a missing or mis-shaped
/// one.
HfModel load_hf_model_with_peft_adapter(const std::string& directory, const std::string& base = "");

}  // namespace bigbatch::models
