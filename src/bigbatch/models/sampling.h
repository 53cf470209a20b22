// Text generation: drawing token after token from a causal model's last logits.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/models/gpt.h"
#include "bigbatch/models/kv_cache.h"

namespace bigbatch::models {

/// How generate_text and generate_ids draw each new byte or token.
struct SampleOptions {
  /// Number of bytes (generate_text) or tokens (generate_ids) appended to the prompt (>= 0).
  TORCH_ARG(int64_t, max_new_bytes) = 300;
  /// Logits are divided by this before the softmax; must be > 0 (smaller is greedier).
  TORCH_ARG(double, temperature) = 0.8;
  /// Only the top_k most likely bytes can be drawn; <= 0 (or >= vocab) keeps all of them.
  TORCH_ARG(int64_t, top_k) = 40;
  /// Seed of the private generator; the same seed gives the same text.
  TORCH_ARG(uint64_t, seed) = 1;
  /// Only ids below this can be drawn (a tokenizer's size, where the model's vocabulary is padded
  /// beyond the ids it has tokens for: Qwen2, Pythia); <= 0 (or >= vocab) keeps all of them.
  TORCH_ARG(int64_t, drawable_ids) = 0;
};

/// Continues `prompt` byte by byte and returns prompt + exactly max_new_bytes new bytes.
/// Each step feeds the last `context` bytes (a single '\n' when nothing is there yet), takes
/// the last position's logits, applies temperature and top-k, and draws with torch::multinomial
/// from a private CPU generator seeded with `options.seed`, so the global RNG is untouched.
/// Runs in eval mode without autograd and restores the model's train/eval mode afterwards.
/// Throws bigbatch::InputError if temperature <= 0, max_new_bytes < 0 or vocab > 256.
std::string generate_text(Gpt& model, const std::string& prompt, const SampleOptions& options);

/// A causal LM as generate_ids runs it.
struct CausalLm {
  /// ids (1, T) int64 -> logits (1, T, V): a forward of the whole window, for every token.
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  /// ids (1, T) int64 following the tokens `cache` holds -> logits (1, T, V), keeping their keys
  /// and values in `cache` (HfGpt2, HfLlama); empty where the model keeps none.
  std::function<torch::Tensor(const torch::Tensor&, KvCache&)> forward_cached;
};

/// Continues the token ids `prompt` (not empty) with up to max_new_bytes drawn ids, as
/// generate_text does for bytes: each step feeds the last `context` ids to `forward` (ids (1, T)
/// int64 -> logits (1, T, V)), applies temperature and top-k to the last position's logits and
/// draws from a private generator seeded with options.seed. Stops after drawing `stop` (which is
/// returned). Returns the new ids only. The caller sets eval mode and no-grad; the weights must not
/// change during the call (their compute-dtype copies are kept, nn/weight_copies.h). Throws
/// InputError for temperature <= 0, max_new_bytes < 0 or an empty prompt.
/// With model.forward_cached, while the prompt and the ids drawn fit in `context` only each new
/// id is fed (the prompt first, whole), and the keys and values of the ones before come from a
/// KvCache; the logits are the same as the whole window's, up to rounding. Once they no longer
/// fit, the window slides and every step is a forward of the last `context` ids, as without.
std::vector<int64_t> generate_ids(const CausalLm& model, std::vector<int64_t> prompt,
                                  int64_t context, const SampleOptions& options,
                                  std::optional<int64_t> stop = std::nullopt,
                                  torch::Device device = torch::kCPU);
/// generate_ids of a model without a KV cache: `forward` of the whole window for every id.
std::vector<int64_t> generate_ids(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                  std::vector<int64_t> prompt, int64_t context,
                                  const SampleOptions& options,
                                  std::optional<int64_t> stop = std::nullopt,
                                  torch::Device device = torch::kCPU);

}  // namespace bigbatch::models
