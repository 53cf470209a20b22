// The Hugging Face architectures bigbatch implements, in one table: the model_type a config.json
// names, the transformers class an export is loaded as, and what the model is trained for.
#pragma once

#include <string>
#include <vector>

namespace bigbatch::models {

/// What a model of a Hugging Face directory is trained for.
enum class HfTask {
  kCausalLm,        ///< next-token prediction: logits (B, T, vocab)
  kClassification,  ///< one class per sequence: logits (B, num_labels)
};

/// One supported architecture.
struct HfArchitecture {
  std::string model_type;  ///< config.json's model_type: "llama"
  std::string class_name;  ///< the transformers class of an export: "LlamaForCausalLM"
  HfTask task = HfTask::kCausalLm;
};

/// Every supported architecture, in the order messages list them.
const std::vector<HfArchitecture>& hf_architectures();

/// The supported model_types, for messages: "gpt2, llama, mistral, qwen2, qwen3, gemma2,
/// gemma3_text, bert, roberta, xlm-roberta, distilbert, electra, modernbert".
std::string hf_model_types();

/// The architecture of `model_type`; throws InputError naming it and hf_model_types() when it is
/// not supported.
const HfArchitecture& hf_architecture(const std::string& model_type);

}  // namespace bigbatch::models
