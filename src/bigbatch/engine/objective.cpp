#include "bigbatch/engine/objective.h"

#include "bigbatch/core/check.h"

namespace bigbatch::engine {

CrossEntropyObjective::CrossEntropyObjective(
    std::function<torch::Tensor(const torch::Tensor&)> forward, LossUnit unit, int64_t ignore_index)
    : forward_(std::move(forward)), unit_(unit), ignore_index_(ignore_index) {}

Counts CrossEntropyObjective::count(const data::Batch& batch) const {
  Counts counts;
  counts.samples = batch.size();
  counts.tokens = batch.targets.ne(ignore_index_).sum().item<int64_t>();
  return counts;
}

torch::Tensor CrossEntropyObjective::loss_sum(const data::Batch& batch) {
  const torch::Tensor logits = forward_(batch.inputs);  // (B, [T,] V)
  const int64_t vocab = logits.size(-1);
  BB_CHECK(logits.numel() / vocab == batch.targets.numel(), "logits ", logits.sizes(),
           " do not match targets ", batch.targets.sizes());
  return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                              batch.targets.reshape({-1}),
                                              torch::nn::functional::CrossEntropyFuncOptions()
                                                  .reduction(torch::kSum)
                                                  .ignore_index(ignore_index_));
}

}  // namespace bigbatch::engine
