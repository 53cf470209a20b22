#include "bigbatch/cli/generate_command.h"

#include "bigbatch/core/check.h"
#include "bigbatch/models/model_export.h"

namespace bigbatch::cli {

int run_generate(const GenerateOptions& options, std::ostream& out) {
  BB_CHECK_INPUT(options.max_new_bytes >= 0, "--max-new-bytes must be >= 0, got ",
                 options.max_new_bytes);
  BB_CHECK_INPUT(options.temperature > 0.0, "--temperature must be > 0, got ", options.temperature);
  models::ExportedModel exported = models::load_exported(options.model_path);
  BB_CHECK_INPUT(exported.spec.kind == models::ModelKind::kGpt, "bigbatch generate needs a gpt; ",
                 options.model_path, " holds a ", models::to_string(exported.spec.kind),
                 exported.spec.classes() > 0 ? " classifier (use bigbatch predict)" : " model");
  const std::string text = models::generate_text(exported.model.gpt, options.prompt,
                                                 models::SampleOptions()
                                                     .max_new_bytes(options.max_new_bytes)
                                                     .temperature(options.temperature)
                                                     .top_k(options.top_k)
                                                     .seed(options.seed));
  out << text << "\n";
  return 0;
}

}  // namespace bigbatch::cli
