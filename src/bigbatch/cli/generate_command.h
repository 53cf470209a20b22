// `bigbatch generate`: continue a prompt with an exported GPT.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "bigbatch/models/sampling.h"

namespace bigbatch::cli {

/// What the command line gave `bigbatch generate`; the sampling defaults are SampleOptions'.
struct GenerateOptions {
  std::string model_path;  ///< an export (export_model) of a gpt
  std::string prompt;      ///< the text to continue
  int64_t max_new_bytes = models::SampleOptions().max_new_bytes();  ///< bytes appended (>= 0)
  double temperature = models::SampleOptions().temperature();       ///< > 0; smaller is greedier
  int64_t top_k = models::SampleOptions().top_k();  ///< draw among the k likeliest; <= 0 = all
  uint64_t seed = models::SampleOptions().seed();   ///< the same seed gives the same text
};

/// Loads the export, continues the prompt with models::generate_text and prints the prompt and
/// its continuation followed by a newline. Throws InputError for a bad option (naming the flag),
/// a file that is not an export (see load_exported) or a model that is not a gpt.
int run_generate(const GenerateOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
