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
};

/// What generate and predict check of their command line before loading anything: --precision
/// (fp32 or bf16; fp16 needs CUDA) and --base, which only a PEFT adapter directory takes. Returns
/// the precision; throws InputError naming the flag.
nn::Precision check_inference_options(const std::string& path, const std::string& base,
                                      const std::string& precision);

/// Loads options.path: a model directory, or a PEFT adapter directory onto its base
/// (models::load_hf_model_with_peft_adapter) with the adapters merged into the weights; the
/// tokenizer of options.path where it has one, else the base's. Throws InputError as the loaders
/// do.
InferenceModel load_inference_model(const InferenceModelOptions& options);

}  // namespace bigbatch::cli
