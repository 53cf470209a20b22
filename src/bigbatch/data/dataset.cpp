#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

Batch to_device(const Batch& batch, const torch::Device& device) {
  const auto moved = [&](const torch::Tensor& t) {
    return t.defined() && t.device() != device ? t.to(device, /*non_blocking=*/t.is_pinned()) : t;
  };
  return {moved(batch.inputs), moved(batch.targets)};
}

}  // namespace bigbatch::data
