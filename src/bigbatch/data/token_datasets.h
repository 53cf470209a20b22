// Datasets of tokenized text for pretrained models: packed causal-LM blocks, instruction
// samples whose loss counts only the responses, and classified sequences. They hold token ids; the
// caller tokenizes (text::Tokenizer).
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

/// Token ids of a tokenized text (vocabularies are far below 2^31).
using TokenIds = std::vector<int32_t>;

/// Documents joined into one stream, `separator` (the tokenizer's EOS) after each:
/// pack_documents({{1, 2}, {3}}, 0) == {1, 2, 0, 3, 0}.
TokenIds pack_documents(const std::vector<TokenIds>& documents, int32_t separator);

/// Settings shared by the token datasets: `TokenDatasetOptions(128).pad_id(0).name("train")`.
struct TokenDatasetOptions {
  /// At most `context` tokens per sample.
  explicit TokenDatasetOptions(int64_t context) : context_(context) {}
  /// Tokens per sample, T (at least 1).
  TORCH_ARG(int64_t, context);
  /// Input id at padded positions (the tokenizer's pad token, or its EOS).
  TORCH_ARG(int64_t, pad_id) = 0;
  /// Target at positions the loss skips (padding, prompts).
  TORCH_ARG(int64_t, ignore_index) = -100;
  /// What the samples are, for messages and the plan table, for example "train".
  TORCH_ARG(std::string, name) = "token data";
};

/// Causal language modelling over a packed token stream, as SequenceDataset over bytes: sample
/// i has inputs tokens[i*T .. i*T + T - 1] and targets tokens[i*T + 1 .. i*T + T]; the final,
/// partial sample is padded with pad_id and ignore_index.
class PackedTokenDataset : public Dataset {
 public:
  /// Throws InputError naming the sizes when the stream has fewer than 2 tokens or context < 1.
  PackedTokenDataset(std::shared_ptr<const TokenIds> tokens, const TokenDatasetOptions& options);
  int64_t size() const override;
  /// inputs (B, T) int64 token ids, targets (B, T) int64 next tokens or ignore_index.
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "1,234 blocks of 128 tokens (157,000 tokens)".
  std::string describe() const override;

 private:
  std::shared_ptr<const TokenIds> tokens_;
  TokenDatasetOptions options_;
};

/// An instruction-tuning sample: its tokens, and which of them the model learns to produce
/// (the responses, or a conversation's assistant turns). The others (prompts, chat markup, user
/// turns) are context only.
struct SupervisedTokens {
  TokenIds tokens;
  std::vector<uint8_t> learned;  ///< 1 where tokens[t] is a target; as long as tokens
};

/// A prompt followed by its response, the response's tokens learned:
/// prompt_then_response({1, 2}, {3}) == {{1, 2, 3}, {0, 0, 1}}.
SupervisedTokens prompt_then_response(const TokenIds& prompt, const TokenIds& response);

/// Instruction tuning: each sample is cut to context + 1 tokens, predicting each next token;
/// targets are ignore_index where the next token is not learned and over the padding, so the
/// loss and the window normalisation count learned (response) tokens only. T is the longest
/// sample (at most context); shorter ones are right-padded with pad_id, which a causal model
/// never attends to from a real position. Samples that keep no learned token within the context
/// (a prompt that fills it) are dropped and counted.
class SupervisedTokenDataset : public Dataset {
 public:
  /// Throws InputError when context < 1 or no sample keeps a learned token; std::logic_error
  /// when a sample's mask is not as long as its tokens.
  SupervisedTokenDataset(std::vector<SupervisedTokens> samples, const TokenDatasetOptions& options);
  int64_t size() const override;
  /// inputs (B, T) int64, targets (B, T) int64 (ignore_index where not learned).
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "500 samples, up to 256 tokens (12,345 response tokens; 2 dropped: no response
  /// token within the context)".
  std::string describe() const override;
  /// Samples dropped because they keep no learned token within the context.
  int64_t dropped() const { return dropped_; }

 private:
  std::vector<SupervisedTokens> samples_;
  TokenDatasetOptions options_;
  int64_t length_ = 0;  ///< T
  int64_t response_tokens_ = 0;
  int64_t dropped_ = 0;
};

/// Sequence classification: token sequences (special tokens included, each at most context
/// long) with a class each. Inputs are right-padded with pad_id to the longest sequence (the
/// model's attention mask is inputs != pad_id), targets are class ids.
class TokenClassificationDataset : public Dataset {
 public:
  /// Throws InputError for different lengths, an empty or over-long sequence, or a label
  /// outside [0, class_names.size()).
  TokenClassificationDataset(std::vector<TokenIds> sequences, std::vector<int64_t> labels,
                             std::vector<std::string> class_names,
                             const TokenDatasetOptions& options);
  int64_t size() const override;
  /// inputs (B, T) int64 token ids then pad_id, targets (B) int64 class ids.
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "1,200 texts of up to 128 tokens, 20 classes".
  std::string describe() const override;
  /// The `count` longest texts, first in order among equals: a model that skips padding
  /// (hf.skip_padding) costs the most on them.
  std::vector<int64_t> costliest_samples(int64_t count) const override;
  /// Class names by class id.
  const std::vector<std::string>& class_names() const { return class_names_; }
  /// T: the longest sequence.
  int64_t length() const { return length_; }

 private:
  std::vector<TokenIds> sequences_;
  std::vector<int64_t> labels_;
  std::vector<std::string> class_names_;
  TokenDatasetOptions options_;
  int64_t length_ = 0;
};

}  // namespace bigbatch::data
