// Reading a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) onto its
// base model: what `bigbatch export --format peft` writes and what Python's PEFT saves.
#pragma once

#include <string>

#include "bigbatch/models/hf_model.h"

namespace bigbatch::models {

/// Whether `directory` is a PEFT adapter: it holds adapter_config.json and no config.json.
bool is_peft_adapter(const std::string& directory);

/// The base model directory of the adapter in `directory`: `base` when it is not empty, else
/// adapter_config.json's base_model_name_or_path. Throws InputError naming the field and `--base`
/// when that is not a local directory (a hub name, or a path from another machine).
std::string peft_base_model(const std::string& directory, const std::string& base = "");

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
