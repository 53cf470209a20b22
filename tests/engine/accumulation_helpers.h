// Shared pieces of the accumulation tests: window gradients computed through the accumulator.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "bigbatch/data/dataset.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/objective.h"

namespace bigbatch::testing {

/// Rows [begin, end) of a batch.
inline data::Batch rows(const data::Batch& batch, int64_t begin, int64_t end) {
  return {batch.inputs.slice(0, begin, end), batch.targets.slice(0, begin, end)};
}

/// The gradient of `parameters` (flattened and concatenated) after one accumulation window over
/// `micro_batches`, taken before the boundary step.
inline torch::Tensor window_gradient(const std::vector<torch::Tensor>& parameters,
                                     engine::Objective& objective,
                                     const std::vector<data::Batch>& micro_batches) {
  for (const torch::Tensor& p : parameters) {
    if (p.grad().defined())
      p.grad().zero_();
  }
  torch::optim::SGD unused(parameters, torch::optim::SGDOptions(0.1));
  engine::GradientAccumulator accumulator(parameters, unused, nullptr,
                                          engine::AccumulatorOptions().unit(objective.unit()));
  engine::Counts window;
  for (const data::Batch& micro : micro_batches)
    window += objective.count(micro);
  accumulator.begin_window(window);
  for (const data::Batch& micro : micro_batches) {
    accumulator.backward(objective.loss_sum(micro), objective.count(micro));
  }
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : parameters)
    flat.push_back(p.grad().detach().flatten().clone());
  return torch::cat(flat);
}

/// Splits `batch` into consecutive micro-batches of the given sizes.
inline std::vector<data::Batch> split(const data::Batch& batch, const std::vector<int64_t>& sizes) {
  std::vector<data::Batch> parts;
  int64_t begin = 0;
  for (int64_t size : sizes) {
    parts.push_back(rows(batch, begin, begin + size));
    begin += size;
  }
  return parts;
}

}  // namespace bigbatch::testing
