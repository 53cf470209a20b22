// A pretrained Hugging Face model fine-tuned on text: the workload of model.kind = "hf". The
// model directory gives the architecture, the weights and the tokenizer; the data path gives
// the task's samples (docs/PRETRAINED.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/data/token_datasets.h"
#include "bigbatch/job/workload.h"
#include "bigbatch/models/hf_model.h"
#include "bigbatch/models/sampling.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/recompute.h"
#include "bigbatch/text/tokenizer.h"

namespace bigbatch::job {

/// How the pretrained weights are adapted.
struct HfAdapterOptions {
  bool lora = false;  ///< LoRA adapters on frozen weights; false: every weight trains
  /// Rank, alpha, dropout; empty targets take default_lora_targets(model_type), and the modules
  /// the checkpoint lacked (a fresh classifier) are added to trainable.
  nn::LoraOptions lora_options;
  /// Storage of the frozen weights of the linear layers (with lora): float32, bfloat16 or
  /// float16.
  torch::Dtype frozen_dtype = torch::kFloat;
  /// A PEFT LoRA adapter directory to start from ("": fresh adapters): its rank, alpha and
  /// targets replace lora_options', its weights the adapters' initial ones, and its modules saved
  /// whole train in full with their saved weights (models::read_peft_lora_config).
  std::string init_from;
};

/// Which model, on which data, fine-tuned how.
struct HfWorkloadOptions {
  std::string model_path;  ///< a directory in Hugging Face's layout
  /// Tokens per sample; 0: 128 for classification, 256 for a causal LM, at most the model's
  /// position limit.
  int64_t context = 0;
  nn::CheckpointPolicy checkpointing;  ///< per transformer layer
  /// Classification (bert): the encoder computes the real tokens only (models::HfBert's
  /// set_skip_padding), else every padded position too.
  bool skip_padding = true;
  HfAdapterOptions adapter;
  bool float64 = false;  ///< parameters in float64 (exactness tests), else float32
  /// Classification (bert): a directory of fortune files or of one folder of text files per
  /// class. Causal LM: a *.jsonl file of {"prompt", "response"} records (instruction tuning,
  /// the loss counts response tokens only), or a text file or directory (documents packed into
  /// blocks with the tokenizer's EOS between them).
  std::string data_path;
  double val_fraction = 0.1;     ///< share of samples (documents, records, texts) held out
  int64_t min_per_class = 50;    ///< classification: samples a class needs
  uint64_t seed = 1;             ///< seeds the held-out split
  std::string prompt = "The ";   ///< what a causal LM's final sample continues
  models::SampleOptions sample;  ///< the final sample; max_new_bytes counts tokens, 0 = none
};

/// PEFT's default LoRA targets of a model_type: q_proj and v_proj (llama, mistral, qwen2, qwen3,
/// gemma2, gemma3_text), c_attn (gpt2), query and value (bert, roberta, xlm-roberta, electra),
/// q_lin and v_lin (distilbert).
std::vector<std::string> default_lora_targets(const std::string& model_type);

/// The context options.context resolves to for a model limited to `max_positions` positions.
int64_t hf_context(const HfWorkloadOptions& options, bool classification, int64_t max_positions);

/// The token ids of `text` with the tokenizer's special tokens, cut to `context` tokens keeping
/// the special tokens at both ends ([CLS] ... [SEP]) as transformers' truncation does.
data::TokenIds encode_truncated(const text::Tokenizer& tokenizer, const std::string& text,
                                int64_t context);

/// The id that pads a tokenizer's inputs: its pad token, else its EOS, else 0.
int64_t hf_pad_id(const text::Tokenizer& tokenizer);

/// `prompt` followed by the text of what models::generate_ids draws after its tokens (the EOS, else
/// id 0, for an empty prompt) from `lm` on `device`, stopping after the EOS. Ids the tokenizer has
/// no token for (a vocabulary padded beyond it) are never drawn. The caller sets eval mode and
/// no-grad.
std::string continue_prompt(const models::CausalLm& lm, const text::Tokenizer& tokenizer,
                            const std::string& prompt, int64_t context,
                            const models::SampleOptions& sample,
                            torch::Device device = torch::kCPU);

/// The parts of a workload that exports and predictions need besides the module.
struct HfWorkloadParts {
  models::HfModel model;  ///< as loaded and adapted (the workload's module)
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::vector<std::string> class_names;  ///< a classifier's classes, by id
};

/// Loads the model and tokenizer of options.model_path and the data of options.data_path, and
/// builds the workload: the model (initialised as its checkpoint, a fresh head from the current
/// torch seed), its adapters and checkpointing, the tokenized training and validation splits,
/// the token- or sample-weighted cross-entropy with padding ignored, the plan rows and (causal
/// LM) a final sample. Throws InputError naming the file and what is wrong with it.
/// `parts`, when given, receives the model, the tokenizer and the class names.
Workload build_hf_workload(const HfWorkloadOptions& options, HfWorkloadParts* parts = nullptr);

}  // namespace bigbatch::job
