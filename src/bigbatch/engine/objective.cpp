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
  return loss_of(forward_(batch.inputs), batch);
}

EvalSums CrossEntropyObjective::evaluate(const data::Batch& batch) {
  const torch::Tensor logits = forward_(batch.inputs);  // (B, [T,] V)
  EvalSums sums;
  sums.loss_sum = loss_of(logits, batch);
  const torch::Tensor predicted = logits.argmax(-1);  // (B, [T])
  sums.correct = predicted.eq(batch.targets)
                     .logical_and(batch.targets.ne(ignore_index_))
                     .sum()
                     .item<int64_t>();
  return sums;
}

torch::Tensor CrossEntropyObjective::loss_of(const torch::Tensor& logits,
                                             const data::Batch& batch) const {
  const int64_t vocab = logits.size(-1);
  BB_CHECK(logits.numel() / vocab == batch.targets.numel(), "logits ", logits.sizes(),
           " do not match targets ", batch.targets.sizes());
  return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                              batch.targets.reshape({-1}),
                                              torch::nn::functional::CrossEntropyFuncOptions()
                                                  .reduction(torch::kSum)
                                                  .ignore_index(ignore_index_));
}

namespace {

/// cross_entropy already autocasts to float32; a custom loss in bf16/fp16 is widened here.
torch::Tensor widened(const torch::Tensor& loss) {
  const bool reduced = loss.scalar_type() == torch::kBFloat16 || loss.scalar_type() == torch::kHalf;
  return reduced ? loss.to(torch::kFloat) : loss;
}

}  // namespace

AutocastObjective::AutocastObjective(std::unique_ptr<Objective> inner, nn::Precision precision,
                                     torch::DeviceType device_type)
    : inner_(std::move(inner)), precision_(precision), device_type_(device_type) {
  BB_CHECK(inner_ != nullptr, "AutocastObjective needs an objective");
  nn::check_precision_supported(precision, device_type, "precision");
}

torch::Tensor AutocastObjective::loss_sum(const data::Batch& batch) {
  torch::Tensor loss;
  {
    nn::AutocastGuard autocast(precision_, device_type_);
    loss = inner_->loss_sum(batch);
  }
  return widened(loss);
}

EvalSums AutocastObjective::evaluate(const data::Batch& batch) {
  EvalSums sums;
  {
    nn::AutocastGuard autocast(precision_, device_type_);
    sums = inner_->evaluate(batch);
  }
  sums.loss_sum = widened(sums.loss_sum);
  return sums;
}

}  // namespace bigbatch::engine
