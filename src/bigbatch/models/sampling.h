// Byte-level text generation from a Gpt.
#pragma once

#include <cstdint>
#include <string>

#include "bigbatch/models/gpt.h"

namespace bigbatch::models {

/// How generate_text draws each new byte.
struct SampleOptions {
  /// Number of bytes appended to the prompt (>= 0).
  TORCH_ARG(int64_t, max_new_bytes) = 300;
  /// Logits are divided by this before the softmax; must be > 0 (smaller is greedier).
  TORCH_ARG(double, temperature) = 0.8;
  /// Only the top_k most likely bytes can be drawn; <= 0 (or >= vocab) keeps all of them.
  TORCH_ARG(int64_t, top_k) = 40;
  /// Seed of the private generator; the same seed gives the same text.
  TORCH_ARG(uint64_t, seed) = 1;
};

/// Continues `prompt` byte by byte and returns prompt + exactly max_new_bytes new bytes.
/// Each step feeds the last `context` bytes (a single '\n' when nothing is there yet), takes
/// the last position's logits, applies temperature and top-k, and draws with torch::multinomial
/// from a private CPU generator seeded with `options.seed`, so the global RNG is untouched.
/// Runs in eval mode without autograd and restores the model's train/eval mode afterwards.
/// Throws bigbatch::InputError if temperature <= 0, max_new_bytes < 0 or vocab > 256.
std::string generate_text(Gpt& model, const std::string& prompt, const SampleOptions& options);

}  // namespace bigbatch::models
