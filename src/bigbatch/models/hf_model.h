// Any supported Hugging Face architecture behind one interface: what the training job, predict,
// generate and export need of a model directory, whichever model_type its config.json names.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/models/hf_architectures.h"
#include "bigbatch/models/hf_bert.h"
#include "bigbatch/models/hf_gpt2.h"
#include "bigbatch/models/hf_llama.h"
#include "bigbatch/models/hf_modernbert.h"
#include "bigbatch/models/sampling.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// The model_type of `directory`/config.json; throws InputError naming the file, or the value
/// and the supported ones (hf_architectures()) when it is not one of them.
std::string read_hf_model_type(const std::string& directory);

/// The longest input the model of `directory` takes (its config's n_positions or
/// max_position_embeddings, less RoBERTa's pad_token_id + 1), read without loading it.
int64_t read_hf_max_positions(const std::string& directory);

/// The task a supported model_type trains for (hf_architecture(model_type).task).
HfTask hf_task_of(const std::string& model_type);

/// A loaded model of any supported architecture. Exactly one of gpt2, llama, bert and modernbert
/// is set.
struct HfModel {
  std::string model_type;
  HfTask task = HfTask::kCausalLm;
  HfGpt2 gpt2{nullptr};
  HfLlama llama{nullptr};
  HfBert bert{nullptr};
  HfModernBert modernbert{nullptr};
  /// Tensors initialised afresh because the checkpoint lacks them (a classifier head).
  std::vector<std::string> fresh;
  /// The checkpoint's tensors of heads the model has no use for (BERT's pre-training heads,
  /// RoBERTa's masked-LM head and pooler, ModernBERT's decoder), skipped.
  std::vector<std::string> unused;

  /// The modules that train in full beside LoRA adapters and that a PEFT adapter saves whole:
  /// those of the fresh tensors ("bert.pooler.dense"), and a classifier's head as PEFT's
  /// sequence classification wraps it (modules_to_save "classifier" and "score", matched as PEFT
  /// matches them: every module whose name ends so, DistilBERT's "pre_classifier" too). A fresh
  /// tensor inside a head counts as the head (RoBERTa's classifier.dense -> "classifier").
  std::vector<std::string> trained_heads() const;
  /// The module (parameters named as in the checkpoint).
  std::shared_ptr<torch::nn::Module> module() const;
  /// input_ids (B, T) int64; attention_mask (B, T) with 1 at real tokens, or undefined -> logits
  /// (B, T, vocab) for a causal LM, (B, num_labels) for a classifier.
  torch::Tensor forward(const torch::Tensor& input_ids,
                        const torch::Tensor& attention_mask = {}) const;
  /// The causal LM as generate_ids runs it, with its KV cache (forward_cached). InputError for a
  /// classifier.
  CausalLm causal_lm() const;
  /// Sets activation checkpointing per layer; throws InputError for an invalid policy.
  void set_checkpointing(const nn::CheckpointPolicy& policy) const;
  /// The longest input the positions allow (n_positions or max_position_embeddings, less
  /// RoBERTa's pad_token_id + 1).
  int64_t max_positions() const;
  /// Logits per position: the vocabulary, or the classes of a classifier.
  int64_t outputs() const;
  /// Transformer layers.
  int64_t layers() const;
  /// The config in one line, for example "llama: 30 layers, width 576, 9 heads (3 key/value),
  /// vocabulary 49,152".
  std::string describe() const;
  /// The config's dropouts that draw in training, as "hidden_dropout_prob 0.1,
  /// attention_probs_dropout_prob 0.1"; empty when every one is 0.
  std::string dropouts() const;
  /// Whether a classifier skips the padding of its inputs (HfBert's and HfModernBert's
  /// set_skip_padding); nothing for a causal LM.
  void set_skip_padding(bool skip) const;
  /// The parameters of embedding tables that are only read by index (no product uses them: a
  /// tied output head's table does), which cost no FLOPs: BERT's word, position and token type
  /// embeddings (RoBERTa's too); an untied Llama's embed_tokens; GPT-2's wpe, and its wte when
  /// untied; ModernBERT's tok_embeddings.
  int64_t lookup_parameters() const;
};

/// The model of `directory` in float32 with its weights; a classifier (bert, modernbert, ...) gets
/// `num_labels` classes (0: the config's). Throws InputError naming the directory and what is
/// wrong.
HfModel load_hf_model(const std::string& directory, int64_t num_labels = 0);

}  // namespace bigbatch::models
