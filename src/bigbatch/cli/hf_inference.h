// The Hugging Face model that `generate` and `predict` run: a model directory, or a PEFT adapter
// directory on its base model, with its tokenizer.
#pragma once

#include <memory>
#include <string>

#include "bigbatch/models/hf_model.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/text/tokenizer.h"

namespace bigbatch::cli {

/// A model loaded for inference, the directory its config came from, and its tokenizer.
struct InferenceModel {
  models::HfModel model;
  std::string model_directory;  ///< the model directory, or an adapter's base
  std::unique_ptr<text::Tokenizer> tokenizer;
};

/// How load_inference_model loads.
struct InferenceModelOptions {
  std::string path;           ///< a model directory or a PEFT adapter directory
  std::string base;           ///< --base: an adapter's base model directory ("": its config's)
  bool bf16_linears = false;  ///< linear weights in bfloat16 from loading on
  c10::Device device = torch::kCPU;  ///< where the model is moved once loaded
};

/// Where and in what precision generate and predict compute.
struct InferenceSettings {
  nn::Precision precision = nn::Precision::kFp32;
  c10::Device device = torch::kCPU;
};

/// What generate and predict give on their command line besides the model and its inputs.
struct InferenceFlags {
  std::string path;       ///< the model argument
  std::string base;       ///< --base
  std::string precision;  ///< --precision
  std::string device;     ///< --device
};

/// What generate and predict check of their command line before loading anything: --device (cpu,
/// cuda, cuda:N or auto, as train.device), --precision (fp32 or bf16; fp16 needs a CUDA device)
/// and --base, which only a PEFT adapter directory takes. Throws InputError naming the flag.
InferenceSettings check_inference_options(const InferenceFlags& flags);

/// Loads options.path: a model directory, or a PEFT adapter directory onto its base
/// (models::load_hf_model_with_peft_adapter) with the adapters merged into the weights; the
/// tokenizer of options.path where it has one, else the base's; in eval mode on options.device.
/// Throws InputError as the loaders do.
InferenceModel load_inference_model(const InferenceModelOptions& options);

}  // namespace bigbatch::cli
