#include "bigbatch/dist/agreement.h"

#include <algorithm>

namespace bigbatch::dist {

int64_t agree_on_micro_batch(Communicator* communicator, int64_t micro_batch) {
  if (communicator == nullptr)
    return micro_batch;
  const std::vector<torch::Tensor> found = communicator->all_gather(
      torch::tensor({micro_batch}, torch::kInt64), "all-gather of the micro-batch searches");
  int64_t smallest = micro_batch;
  for (const torch::Tensor& size : found)
    smallest = std::min(smallest, size.item<int64_t>());
  return smallest;
}

}  // namespace bigbatch::dist
