#include "bigbatch/cli/hf_inference.h"

#include <filesystem>
#include <optional>

#include "bigbatch/core/check.h"
#include "bigbatch/models/peft_adapter.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/lora_merge.h"

namespace bigbatch::cli {

nn::Precision check_inference_options(const std::string& path, const std::string& base,
                                      const std::string& precision) {
  const nn::Precision parsed = nn::parse_precision(precision, "--precision");
  nn::check_precision_supported(parsed, torch::kCPU, "--precision");
  if (!base.empty()) {
    BB_CHECK_INPUT(std::filesystem::is_directory(path), "--base is for a PEFT adapter directory; ",
                   path, " is not a directory");
    BB_CHECK_INPUT(models::is_peft_adapter(path), "--base is for a PEFT adapter directory; ", path,
                   " holds a whole model (config.json)");
  }
  return parsed;
}

InferenceModel load_inference_model(const InferenceModelOptions& options) {
  InferenceModel loaded;
  const bool adapter = models::is_peft_adapter(options.path);
  loaded.model_directory =
      adapter ? models::peft_base_model(options.path, options.base) : options.path;
  {
    std::optional<nn::LinearStorageScope> narrow_linears;
    if (options.bf16_linears)
      narrow_linears.emplace(torch::kBFloat16);
    loaded.model = adapter ? models::load_hf_model_with_peft_adapter(options.path, options.base)
                           : models::load_hf_model(options.path);
  }
  if (adapter)
    nn::merge_lora(*loaded.model.module());  // plain weights: no adapter products per token
  const bool own_tokenizer = std::filesystem::exists(options.path + "/tokenizer.json") ||
                             std::filesystem::exists(options.path + "/tokenizer.model");
  loaded.tokenizer =
      text::load_tokenizer(adapter && !own_tokenizer ? loaded.model_directory : options.path);
  return loaded;
}

}  // namespace bigbatch::cli
