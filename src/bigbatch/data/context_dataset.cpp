#include "bigbatch/data/context_dataset.h"

#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"

namespace bigbatch::data {

ContextDataset::ContextDataset(std::shared_ptr<const std::vector<uint8_t>> bytes,
                               const ContextDatasetOptions& options)
    : bytes_(std::move(bytes)), options_(options) {
  BB_CHECK(bytes_ != nullptr, "ContextDataset needs bytes, got a null pointer");
  BB_CHECK_INPUT(options_.context() >= 1, options_.name(),
                 ": n-gram context must be at least 1 byte, got ", options_.context());
  BB_CHECK_INPUT(static_cast<int64_t>(bytes_->size()) > options_.context(), options_.name(),
                 " has ", bytes_->size(), " bytes; need at least ", options_.context() + 1,
                 " (context ", options_.context(), " plus one target byte)");
}

ContextDataset::ContextDataset(std::vector<uint8_t> bytes, const ContextDatasetOptions& options)
    : ContextDataset(std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), options) {}

int64_t ContextDataset::size() const {
  return static_cast<int64_t>(bytes_->size()) - options_.context();
}

Batch ContextDataset::get(const std::vector<int64_t>& indices) const {
  const int64_t batch = static_cast<int64_t>(indices.size());
  const int64_t context = options_.context();
  const int64_t samples = size();
  torch::Tensor inputs = torch::empty({batch, context}, torch::kLong);  // (B, k)
  torch::Tensor targets = torch::empty({batch}, torch::kLong);          // (B,)
  int64_t* input_rows = inputs.data_ptr<int64_t>();
  int64_t* target_values = targets.data_ptr<int64_t>();
  const uint8_t* data = bytes_->data();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = indices[b];
    BB_CHECK(i >= 0 && i < samples, "context index ", i, " is outside [0, ", samples, ")");
    for (int64_t t = 0; t < context; ++t)
      input_rows[b * context + t] = data[i + t];
    target_values[b] = data[i + context];
  }
  return {inputs, targets};
}

std::string ContextDataset::describe() const {
  return cat(group_thousands(size()), " contexts of ", group_thousands(options_.context()),
             " bytes (", group_thousands(static_cast<int64_t>(bytes_->size())), " bytes)");
}

}  // namespace bigbatch::data
