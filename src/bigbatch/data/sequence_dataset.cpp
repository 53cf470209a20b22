#include "bigbatch/data/sequence_dataset.h"

#include <algorithm>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"

namespace bigbatch::data {

SequenceDataset::SequenceDataset(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                 const SequenceDatasetOptions& options)
    : bytes_(std::move(bytes)), options_(options) {
  BB_CHECK(bytes_ != nullptr, "SequenceDataset needs bytes, got a null pointer");
  BB_CHECK_INPUT(options_.context() >= 1, options_.name(),
                 ": sequence context must be at least 1 byte, got ", options_.context());
  BB_CHECK_INPUT(bytes_->size() >= 2, options_.name(), " has ", bytes_->size(),
                 " bytes; need at least 2 to form one sequence (input and next-byte target) of "
                 "context ",
                 options_.context());
}

SequenceDataset::SequenceDataset(std::vector<uint8_t> bytes, const SequenceDatasetOptions& options)
    : SequenceDataset(std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), options) {}

int64_t SequenceDataset::size() const {
  const auto n = static_cast<int64_t>(bytes_->size());
  return (n - 2) / options_.context() + 1;
}

Batch SequenceDataset::get(const std::vector<int64_t>& indices) const {
  const int64_t batch = static_cast<int64_t>(indices.size());
  const int64_t context = options_.context();
  const int64_t n = static_cast<int64_t>(bytes_->size());
  const int64_t samples = size();
  torch::Tensor inputs = torch::zeros({batch, context}, torch::kLong);  // (B, T)
  torch::Tensor targets =
      torch::full({batch, context}, options_.ignore_index(), torch::kLong);  // (B, T)
  int64_t* input_rows = inputs.data_ptr<int64_t>();
  int64_t* target_rows = targets.data_ptr<int64_t>();
  const uint8_t* data = bytes_->data();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = indices[b];
    BB_CHECK(i >= 0 && i < samples, "sequence index ", i, " is outside [0, ", samples, ")");
    const int64_t start = i * context;
    // Positions t with start + t + 1 < n have a target; the rest stay padding.
    const int64_t valid = std::min(context, n - 1 - start);
    for (int64_t t = 0; t < valid; ++t) {
      input_rows[b * context + t] = data[start + t];
      target_rows[b * context + t] = data[start + t + 1];
    }
  }
  return {inputs, targets};
}

std::string SequenceDataset::describe() const {
  return cat(group_thousands(size()), " sequences of ", group_thousands(options_.context()),
             " bytes (", group_thousands(static_cast<int64_t>(bytes_->size())), " bytes)");
}

}  // namespace bigbatch::data
