// Copying a Hugging Face checkpoint's tensors into a module whose parameters carry the
// checkpoint's names.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/io/hf_weights.h"

namespace bigbatch::models {

/// How a checkpoint's names may differ from the module's.
struct HfLoadOptions {
  /// A prefix of the module's names that a checkpoint may lack: "transformer." for a GPT-2 saved
  /// as GPT2Model rather than GPT2LMHeadModel.
  TORCH_ARG(std::string, optional_prefix) = "";
  /// Checkpoint tensors to skip, by the end of their name on a dot (a suffix "classifier.weight"
  /// skips "classifier.weight" and "x.classifier.weight", not "pre_classifier.weight"): buffers
  /// that are no parameters (GPT-2's "attn.bias" and "attn.masked_bias" of older checkpoints),
  /// or a head replaced by a fresh one (then also listed under fresh_prefixes).
  TORCH_ARG(std::vector<std::string>, ignored_suffixes) = {};
  /// Module names under these prefixes may be absent from the checkpoint and keep their fresh
  /// initialisation (a classifier head a pretrained encoder never had).
  TORCH_ARG(std::vector<std::string>, fresh_prefixes) = {};
  /// Checkpoint tensors under these prefixes belong to heads the module does not have (BERT's
  /// pre-training heads "cls."); they are skipped and listed in HfLoadResult::unused.
  TORCH_ARG(std::vector<std::string>, unused_prefixes) = {};
};

/// What load_hf_weights left aside.
struct HfLoadResult {
  /// The module's tensors left as initialised (under HfLoadOptions::fresh_prefixes and absent
  /// from the checkpoint).
  std::vector<std::string> fresh;
  /// The checkpoint's tensors skipped under HfLoadOptions::unused_prefixes.
  std::vector<std::string> unused;
};

/// Copies every parameter and buffer of `module` from `weights` (converted to the parameter's
/// dtype and device), without recording gradients. A LayerNorm's weight and bias are also found
/// under their legacy names, "LayerNorm.gamma" and "LayerNorm.beta" (as transformers renames
/// them). Throws InputError, naming `origin` (the model directory), for a tensor the module needs
/// that the checkpoint lacks, one of another shape (both shapes named), and the checkpoint's
/// tensors that the module has no place for (all of them named). Nothing is copied unless every
/// check passes.
HfLoadResult load_hf_weights(torch::nn::Module& module, const io::HfWeights& weights,
                             const HfLoadOptions& options, const std::string& origin);

}  // namespace bigbatch::models
