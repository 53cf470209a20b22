#include "bigbatch/cli/generate_command.h"

#include <filesystem>

#include "bigbatch/cli/hf_inference.h"
#include "bigbatch/core/check.h"
#include "bigbatch/job/hf_workload.h"
#include "bigbatch/models/hf_model.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/text/tokenizer.h"

namespace bigbatch::cli {

namespace {

models::SampleOptions sample_options(const GenerateOptions& options) {
  return models::SampleOptions()
      .max_new_bytes(options.max_new_bytes)
      .temperature(options.temperature)
      .top_k(options.top_k)
      .seed(options.seed);
}

/// A causal LM of a Hugging Face model directory (or a PEFT adapter on one) continues the prompt,
/// token by token, until max_new_bytes tokens or its EOS.
int generate_hf(const GenerateOptions& options, const InferenceSettings& settings,
                std::ostream& out) {
  InferenceModel loaded = load_inference_model(
      InferenceModelOptions{options.model_path, options.base,
                            settings.precision == nn::Precision::kBf16, settings.device});
  const models::HfModel& model = loaded.model;
  BB_CHECK_INPUT(model.task == models::HfTask::kCausalLm, "bigbatch generate needs a causal LM; ",
                 options.model_path, " holds a ", model.model_type,
                 " classifier (use bigbatch predict)");
  torch::NoGradGuard no_grad;
  models::CausalLm lm = model.causal_lm();
  if (options.no_kv_cache)
    lm.forward_cached = nullptr;
  const nn::AutocastGuard autocast(settings.precision, settings.device.type());
  out << job::continue_prompt(lm, *loaded.tokenizer, options.prompt, model.max_positions(),
                              sample_options(options), settings.device)
      << "\n";
  return 0;
}

}  // namespace

int run_generate(const GenerateOptions& options, std::ostream& out) {
  BB_CHECK_INPUT(options.max_new_bytes >= 0, "--max-new-bytes must be >= 0, got ",
                 options.max_new_bytes);
  BB_CHECK_INPUT(options.temperature > 0.0, "--temperature must be > 0, got ", options.temperature);
  const InferenceSettings settings = check_inference_options(
      {options.model_path, options.base, options.precision, options.device});
  if (std::filesystem::is_directory(options.model_path))
    return generate_hf(options, settings, out);
  models::ExportedModel exported = models::load_exported(options.model_path);
  BB_CHECK_INPUT(exported.spec.kind == models::ModelKind::kGpt, "bigbatch generate needs a gpt; ",
                 options.model_path, " holds a ", models::to_string(exported.spec.kind),
                 exported.spec.classes() > 0 ? " classifier (use bigbatch predict)" : " model");
  exported.model.gpt->to(settings.device);
  const nn::AutocastGuard autocast(settings.precision, settings.device.type());
  const std::string text =
      models::generate_text(exported.model.gpt, options.prompt, sample_options(options));
  out << text << "\n";
  return 0;
}

}  // namespace bigbatch::cli
