// What the C++ product benchmarks share: one product's shape as the models use it, its operands
// in a dtype, its FLOPs and its layout label.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::bench {

/// One product: a (n, k) times b (k, m), either operand stored transposed, as the models use them:
/// b a transposed weight (a Linear's forward), a transposed where a weight gradient reads it so.
struct ProductShape {
  const char* what;
  int64_t n, k, m;
  bool a_transposed, b_transposed;

  /// a (n, k), random normal in `dtype`, a transposed view where a_transposed.
  torch::Tensor a(torch::ScalarType dtype) const {
    return a_transposed ? torch::randn({k, n}).to(dtype).t() : torch::randn({n, k}).to(dtype);
  }
  /// b (k, m), random normal in `dtype`, a transposed view where b_transposed.
  torch::Tensor b(torch::ScalarType dtype) const {
    return b_transposed ? torch::randn({m, k}).to(dtype).t() : torch::randn({k, m}).to(dtype);
  }
  /// 2 n k m.
  double flop() const { return 2.0 * double(n) * double(k) * double(m); }
  /// "a^T", "b^T" or "": which operand is a transposed view.
  const char* layout() const { return a_transposed ? "a^T" : (b_transposed ? "b^T" : ""); }
};

}  // namespace bigbatch::bench
