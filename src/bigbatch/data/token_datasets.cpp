#include "bigbatch/data/token_datasets.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/next_token_rows.h"

namespace bigbatch::data {

namespace {

void check_context(const TokenDatasetOptions& options) {
  BB_CHECK_INPUT(options.context() >= 1, options.name(), ": context must be at least 1 token, got ",
                 options.context());
}

/// The sample at `index` of a dataset of `size` samples; std::logic_error outside.
size_t checked(int64_t index, int64_t size) {
  BB_CHECK(index >= 0 && index < size, "sample index ", index, " is outside [0, ", size, ")");
  return static_cast<size_t>(index);
}

}  // namespace

TokenIds pack_documents(const std::vector<TokenIds>& documents, int32_t separator) {
  TokenIds stream;
  for (const TokenIds& document : documents) {
    stream.insert(stream.end(), document.begin(), document.end());
    stream.push_back(separator);
  }
  return stream;
}

PackedTokenDataset::PackedTokenDataset(std::shared_ptr<const TokenIds> tokens,
                                       const TokenDatasetOptions& options)
    : tokens_(std::move(tokens)), options_(options) {
  BB_CHECK(tokens_ != nullptr, "PackedTokenDataset needs tokens, got a null pointer");
  check_context(options_);
  BB_CHECK_INPUT(tokens_->size() >= 2, options_.name(), " has ", tokens_->size(),
                 " tokens; need at least 2 to form one block (input and next-token target)");
}

int64_t PackedTokenDataset::size() const {
  return next_token_samples(static_cast<int64_t>(tokens_->size()), options_.context());
}

Batch PackedTokenDataset::get(const std::vector<int64_t>& indices) const {
  return next_token_batch(tokens_->data(), static_cast<int64_t>(tokens_->size()), indices,
                          options_.context(), options_.pad_id(), options_.ignore_index());
}

std::string PackedTokenDataset::describe() const {
  return cat(group_thousands(size()), " blocks of ", group_thousands(options_.context()),
             " tokens (", group_thousands(static_cast<int64_t>(tokens_->size())), " tokens)");
}

SupervisedTokens prompt_then_response(const TokenIds& prompt, const TokenIds& response) {
  SupervisedTokens sample;
  sample.tokens = prompt;
  sample.tokens.insert(sample.tokens.end(), response.begin(), response.end());
  sample.learned.assign(prompt.size(), 0);
  sample.learned.resize(sample.tokens.size(), 1);
  return sample;
}

SupervisedTokenDataset::SupervisedTokenDataset(std::vector<SupervisedTokens> samples,
                                               const TokenDatasetOptions& options)
    : options_(options) {
  check_context(options_);
  const auto limit = static_cast<size_t>(options_.context()) + 1;  // inputs and the last target
  for (SupervisedTokens& sample : samples) {
    BB_CHECK(sample.learned.size() == sample.tokens.size(), "a sample of ", sample.tokens.size(),
             " tokens has a learned mask of ", sample.learned.size());
    const size_t kept = std::min(sample.tokens.size(), limit);
    // Token 0 is never a target: nothing before it predicts it.
    const auto learned = static_cast<int64_t>(
        kept < 2 ? 0 : std::count(sample.learned.begin() + 1, sample.learned.begin() + kept, 1));
    if (learned == 0) {
      ++dropped_;
      continue;
    }
    sample.tokens.resize(kept);
    sample.learned.resize(kept);
    response_tokens_ += learned;
    length_ = std::max(length_, static_cast<int64_t>(kept) - 1);
    samples_.push_back(std::move(sample));
  }
  BB_CHECK_INPUT(!samples_.empty(), options_.name(), ": none of the ", dropped_,
                 " samples keeps a response token within the context of ", options_.context(),
                 " tokens (a longer context, or shorter prompts)");
}

int64_t SupervisedTokenDataset::size() const {
  return static_cast<int64_t>(samples_.size());
}

Batch SupervisedTokenDataset::get(const std::vector<int64_t>& indices) const {
  const auto batch = static_cast<int64_t>(indices.size());
  torch::Tensor inputs = torch::full({batch, length_}, options_.pad_id(), torch::kLong);  // (B, T)
  torch::Tensor targets =
      torch::full({batch, length_}, options_.ignore_index(), torch::kLong);  // (B, T)
  int64_t* input_rows = inputs.data_ptr<int64_t>();
  int64_t* target_rows = targets.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const SupervisedTokens& sample = samples_[checked(indices[static_cast<size_t>(b)], size())];
    for (size_t t = 0; t + 1 < sample.tokens.size(); ++t) {
      const auto at = b * length_ + static_cast<int64_t>(t);
      input_rows[at] = sample.tokens[t];
      if (sample.learned[t + 1] != 0)
        target_rows[at] = sample.tokens[t + 1];
    }
  }
  return {inputs, targets};
}

std::string SupervisedTokenDataset::describe() const {
  return cat(
      group_thousands(size()), " samples, up to ", group_thousands(length_), " tokens (",
      group_thousands(response_tokens_), " response tokens",
      dropped_ > 0 ? cat("; ", dropped_, " dropped: no response token within the context") : "",
      ")");
}

TokenClassificationDataset::TokenClassificationDataset(std::vector<TokenIds> sequences,
                                                       std::vector<int64_t> labels,
                                                       std::vector<std::string> class_names,
                                                       const TokenDatasetOptions& options)
    : sequences_(std::move(sequences)),
      labels_(std::move(labels)),
      class_names_(std::move(class_names)),
      options_(options) {
  check_context(options_);
  BB_CHECK_INPUT(sequences_.size() == labels_.size(), options_.name(), ": ", sequences_.size(),
                 " sequences but ", labels_.size(), " labels");
  const auto classes = static_cast<int64_t>(class_names_.size());
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const auto length = static_cast<int64_t>(sequences_[i].size());
    BB_CHECK_INPUT(length >= 1 && length <= options_.context(), options_.name(), ": sequence ", i,
                   " has ", length, " tokens, outside [1, context = ", options_.context(), "]");
    BB_CHECK_INPUT(labels_[i] >= 0 && labels_[i] < classes, options_.name(), ": label ", labels_[i],
                   " of sequence ", i, " is outside [0, ", classes, ")");
    length_ = std::max(length_, length);
  }
}

int64_t TokenClassificationDataset::size() const {
  return static_cast<int64_t>(sequences_.size());
}

Batch TokenClassificationDataset::get(const std::vector<int64_t>& indices) const {
  const auto batch = static_cast<int64_t>(indices.size());
  torch::Tensor inputs = torch::full({batch, length_}, options_.pad_id(), torch::kLong);  // (B, T)
  torch::Tensor targets = torch::empty({batch}, torch::kLong);                            // (B)
  int64_t* input_rows = inputs.data_ptr<int64_t>();
  int64_t* target_rows = targets.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const size_t i = checked(indices[static_cast<size_t>(b)], size());
    std::copy(sequences_[i].begin(), sequences_[i].end(), input_rows + b * length_);
    target_rows[b] = labels_[i];
  }
  return {inputs, targets};
}

std::vector<int64_t> TokenClassificationDataset::costliest_samples(int64_t count) const {
  std::vector<int64_t> indices(sequences_.size());
  std::iota(indices.begin(), indices.end(), 0);
  const size_t chosen = static_cast<size_t>(std::clamp<int64_t>(count, 0, size()));
  std::stable_sort(indices.begin(), indices.end(), [this](int64_t a, int64_t b) {
    return sequences_[static_cast<size_t>(a)].size() > sequences_[static_cast<size_t>(b)].size();
  });
  indices.resize(chosen);
  return indices;
}

std::string TokenClassificationDataset::describe() const {
  return cat(group_thousands(size()), " texts of up to ", group_thousands(length_), " tokens, ",
             class_names_.size(), " classes");
}

}  // namespace bigbatch::data
