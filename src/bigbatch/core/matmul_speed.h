// How fast this machine multiplies matrices, as LibTorch runs them.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace bigbatch {

/// A measured matrix-product rate.
struct MatmulSpeed {
  double gflops = 0.0;   ///< 2 n^3 floating-point operations per product, per second, / 1e9
  int64_t size = 0;      ///< n: the products were (n x n) x (n x n)
  int64_t products = 0;  ///< products timed
  double seconds = 0.0;  ///< their wall time
};

/// A matrix product to time: a (n, n), b (n, n) -> (n, n).
using MatmulProduct = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

/// Times `product` (torch::mm when empty) of two n x n matrices of `dtype` on the CPU with the
/// thread settings in effect for about `seconds` (at least one product, after a warm-up one). n
/// starts at 256 and doubles up to 1024 while one product takes under 100 ms, so a slow path (bf16
/// without hardware support) is measured on a smaller size instead of taking minutes.
MatmulSpeed measure_matmul(torch::Dtype dtype, double seconds, MatmulProduct product = {});

}  // namespace bigbatch
