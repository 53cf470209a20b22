#include "bigbatch/models/hf_architectures.h"

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"

namespace bigbatch::models {

const std::vector<HfArchitecture>& hf_architectures() {
  static const std::vector<HfArchitecture> kArchitectures = {
      {"gpt2", "GPT2LMHeadModel", HfTask::kCausalLm},
      {"llama", "LlamaForCausalLM", HfTask::kCausalLm},
      {"mistral", "MistralForCausalLM", HfTask::kCausalLm},
      {"qwen2", "Qwen2ForCausalLM", HfTask::kCausalLm},
      {"qwen3", "Qwen3ForCausalLM", HfTask::kCausalLm},
      {"gemma2", "Gemma2ForCausalLM", HfTask::kCausalLm},
      {"gemma3_text", "Gemma3ForCausalLM", HfTask::kCausalLm},
      {"bert", "BertForSequenceClassification", HfTask::kClassification},
      {"roberta", "RobertaForSequenceClassification", HfTask::kClassification},
      {"xlm-roberta", "XLMRobertaForSequenceClassification", HfTask::kClassification},
      {"distilbert", "DistilBertForSequenceClassification", HfTask::kClassification},
      {"electra", "ElectraForSequenceClassification", HfTask::kClassification},
      {"modernbert", "ModernBertForSequenceClassification", HfTask::kClassification}};
  return kArchitectures;
}

std::string hf_model_types() {
  std::vector<std::string> types;
  for (const HfArchitecture& architecture : hf_architectures())
    types.push_back(architecture.model_type);
  return join(types);
}

const HfArchitecture& hf_architecture(const std::string& model_type) {
  for (const HfArchitecture& architecture : hf_architectures()) {
    if (architecture.model_type == model_type)
      return architecture;
  }
  throw InputError(cat("model_type \"", model_type, "\" is not one bigbatch implements (",
                       hf_model_types(), ")"));
}

}  // namespace bigbatch::models
