#include "bigbatch/data/sequence_dataset.h"

#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/next_token_rows.h"

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
  return next_token_samples(static_cast<int64_t>(bytes_->size()), options_.context());
}

Batch SequenceDataset::get(const std::vector<int64_t>& indices) const {
  return next_token_batch(bytes_->data(), static_cast<int64_t>(bytes_->size()), indices,
                          options_.context(), /*pad_input=*/0, options_.ignore_index());
}

std::string SequenceDataset::describe() const {
  return cat(group_thousands(size()), " sequences of ", group_thousands(options_.context()),
             " bytes (", group_thousands(static_cast<int64_t>(bytes_->size())), " bytes)");
}

}  // namespace bigbatch::data
