// Exporting a fine-tuned Hugging Face model so that transformers and peft load it: the whole model
// in the Hugging Face layout, adapters merged in, or only the adapters in PEFT's layout, to be
// loaded on top of the unchanged base model.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/models/hf_model.h"

namespace bigbatch::models {

/// What save_hf_model writes.
enum class HfExportMode {
  /// A whole model directory: config.json, model.safetensors (float32, adapters folded into
  /// their weights) and the source's tokenizer files. transformers' AutoModelFor... loads it.
  kMerged,
  /// Only the adapters and the modules trained in full: adapter_config.json and
  /// adapter_model.safetensors, for peft's PeftModel.from_pretrained(base, directory) on the
  /// source directory's model.
  kPeft,
};

/// Where and how save_hf_model exports.
struct HfExportOptions {
  /// The model directory the model was loaded from (load_hf_model): its config.json and tokenizer
  /// files are copied, and kPeft names it as the base model.
  TORCH_ARG(std::string, source_directory) = "";
  /// The directory to write; created with its parents.
  TORCH_ARG(std::string, output_directory) = "";
  TORCH_ARG(HfExportMode, mode) = HfExportMode::kMerged;
  /// A classifier's class names, index by index (id2label / label2id); empty: the source's
  /// id2label when it has as many classes, else "LABEL_0", "LABEL_1", ...
  TORCH_ARG(std::vector<std::string>, class_names) = {};
  /// kPeft: the modules saved in full besides the adapters (PEFT's modules_to_save), matched as
  /// nn::LoraOptions::trainable (pass the same list). HfModel::trained_heads() are added to
  /// them: the modules of tensors the source lacked (such as a new classifier) and a
  /// classifier's head, which peft's sequence classification loads whole.
  TORCH_ARG(std::vector<std::string>, modules_to_save) = {};
  /// Whether an output directory that holds files may be replaced.
  TORCH_ARG(bool, overwrite) = false;
};

/// Writes `model` (loaded from options.source_directory, possibly with nn::apply_lora adapters and
/// nn::store_frozen_weights) into options.output_directory.
///
/// kMerged writes
/// - config.json: the source's, field order kept, with `architectures` set to the class the model
///   now is (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
///   BertForSequenceClassification), `dtype` (and `torch_dtype` where present) "float32", and for
///   a classifier `id2label` / `label2id` (and `num_labels` where present) of its classes;
/// - model.safetensors: every parameter and buffer under the checkpoint's names in float32,
///   contiguous (frozen bfloat16 weights widened, each adapter folded into its weight:
///   nn::merged_lora_weight, no lora_A / lora_B), tied embeddings once (no lm_head.weight), with
///   the metadata {"format": "pt"};
/// - the source's tokenizer.json, tokenizer_config.json, special_tokens_map.json,
///   tokenizer.model, vocab.txt, merges.txt, vocab.json, added_tokens.json,
///   generation_config.json and chat_template.jinja, those it has.
///
/// kPeft writes
/// - adapter_model.safetensors: `base_model.model.<module>.lora_A.weight` (rank, in) and
///   `.lora_B.weight` (out, rank) of every adapted module, and every parameter of the
///   modules_to_save as `base_model.model.<module>.<name>` (as peft 0.21 saves them), float32;
/// - adapter_config.json: peft_type "LORA", r, lora_alpha, lora_dropout, target_modules (the
///   adapted modules' full names), modules_to_save, task_type (SEQ_CLS or CAUSAL_LM),
///   base_model_name_or_path (the source directory, absolute), bias "none", fan_in_fan_out
///   (true for GPT-2's Conv1D layers).
///
/// The files are written into `<output_directory>.partial-<pid>`, which is renamed to
/// output_directory once complete: a reader never sees half an export. Throws InputError naming
/// the path or field for: an empty output_directory, one that holds files (unless
/// options.overwrite), a source_directory without config.json or of another model_type, class
/// names not as many as the classes, kPeft on a model without adapters, adapters of different
/// ranks, alphas, dropouts or layouts, and (kPeft) a trainable parameter outside the adapters
/// and modules_to_save (its change would be lost). Returns the names of the files written.
std::vector<std::string> save_hf_model(const HfModel& model, const HfExportOptions& options);

}  // namespace bigbatch::models
