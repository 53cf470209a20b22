// Size of an autograd graph: a memory measure that needs no allocator tracking.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <unordered_set>
#include <vector>

namespace bigbatch::testing {

/// The number of distinct autograd nodes reachable from `root` (its grad_fn and everything its
/// next_edges() lead to, AccumulateGrad leaves included). Every non-leaf node holds the tensors
/// it saved for backward, so fewer nodes means fewer activations kept alive.
inline int64_t graph_size(const torch::Tensor& root) {
  std::vector<torch::autograd::Node*> stack;
  std::unordered_set<torch::autograd::Node*> seen;
  if (root.grad_fn()) {
    stack.push_back(root.grad_fn().get());
    seen.insert(stack.back());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      torch::autograd::Node* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second)
        stack.push_back(next);
    }
  }
  return int64_t(seen.size());
}

}  // namespace bigbatch::testing
