#include "bigbatch/data/dataset.h"

#include <algorithm>
#include <numeric>

namespace bigbatch::data {

Batch to_device(const Batch& batch, const torch::Device& device) {
  const auto moved = [&](const torch::Tensor& t) {
    return t.defined() && t.device() != device ? t.to(device, /*non_blocking=*/t.is_pinned()) : t;
  };
  return {moved(batch.inputs), moved(batch.targets)};
}

std::vector<int64_t> Dataset::costliest_samples(int64_t count) const {
  std::vector<int64_t> indices(static_cast<size_t>(std::clamp<int64_t>(count, 0, size())));
  std::iota(indices.begin(), indices.end(), 0);
  return indices;
}

}  // namespace bigbatch::data
