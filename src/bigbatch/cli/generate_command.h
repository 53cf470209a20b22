// `bigbatch generate`: continue a prompt with an exported GPT or a Hugging Face causal LM.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "bigbatch/models/sampling.h"

namespace bigbatch::cli {

/// What the command line gave `bigbatch generate`; the sampling defaults are SampleOptions'.
struct GenerateOptions {
  std::string model_path;  ///< an export (export_model) of a gpt, a Hugging Face directory, or
                           ///< a PEFT adapter directory
  std::string base;        ///< an adapter's base model directory ("": its adapter_config.json's)
  std::string prompt;      ///< the text to continue
  /// Bytes appended (>= 0); tokens for a Hugging Face model, which also stops at its EOS.
  int64_t max_new_bytes = models::SampleOptions().max_new_bytes();
  double temperature = models::SampleOptions().temperature();  ///< > 0; smaller is greedier
  int64_t top_k = models::SampleOptions().top_k();  ///< draw among the k likeliest; <= 0 = all
  uint64_t seed = models::SampleOptions().seed();   ///< the same seed gives the same text
  /// "fp32", or "bf16": forward passes under bf16 autocast, and a Hugging Face model's linear
  /// weights stored in bfloat16 from loading on (nn::LinearStorageScope); "fp16" on a GPU.
  std::string precision = "fp32";
  /// Where the model computes: "cpu", "cuda", "cuda:N" or "auto" (bigbatch::parse_device).
  std::string device = "cpu";
  /// A Hugging Face model recomputes the whole window for every token instead of keeping the
  /// keys and values of the tokens before (models::KvCache): the same text, slower.
  bool no_kv_cache = false;
};

/// Loads the export, continues the prompt with models::generate_text and prints the prompt and
/// its continuation followed by a newline. A directory is read as a Hugging Face causal LM with
/// its tokenizer (models::generate_ids up to its EOS, with a KV cache unless no_kv_cache), a PEFT
/// adapter directory as its base model with the adapters merged (cli::load_inference_model). Throws
/// InputError for a bad option (naming the flag; --precision fp16, which needs CUDA, among them), a
/// file that is not an export (see load_exported) or a model that is not a gpt.
int run_generate(const GenerateOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
