#include "bigbatch/cli/hf_inference.h"

#include <filesystem>
#include <optional>

#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/models/peft_adapter.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/lora_merge.h"

namespace bigbatch::cli {

InferenceSettings check_inference_options(const InferenceFlags& flags) {
  InferenceSettings settings;
  settings.device = parse_device(flags.device, cuda_availability(), "--device");
  settings.precision = nn::parse_precision(flags.precision, "--precision");
  nn::check_precision_supported(settings.precision, settings.device.type(), "--precision");
  if (!flags.base.empty()) {
    BB_CHECK_INPUT(std::filesystem::is_directory(flags.path),
                   "--base is for a PEFT adapter directory; ", flags.path, " is not a directory");
    BB_CHECK_INPUT(models::is_peft_adapter(flags.path), "--base is for a PEFT adapter directory; ",
                   flags.path, " holds a whole model (config.json)");
  }
  return settings;
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
  loaded.model.module()->to(options.device);
  loaded.model.module()->eval();
  const bool own_tokenizer = std::filesystem::exists(options.path + "/tokenizer.json") ||
                             std::filesystem::exists(options.path + "/tokenizer.model");
  loaded.tokenizer =
      text::load_tokenizer(adapter && !own_tokenizer ? loaded.model_directory : options.path);
  return loaded;
}

}  // namespace bigbatch::cli
