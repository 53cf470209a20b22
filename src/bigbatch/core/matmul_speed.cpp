#include "bigbatch/core/matmul_speed.h"

#include <chrono>

namespace bigbatch {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

MatmulSpeed measure_matmul(torch::Dtype dtype, double seconds, MatmulProduct product) {
  if (!product)
    product = [](const torch::Tensor& a, const torch::Tensor& b) { return torch::mm(a, b); };
  const torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype);
  MatmulSpeed speed;
  torch::Tensor a;
  torch::Tensor b;
  for (int64_t n = 256;; n *= 2) {
    a = torch::randn({n, n}).to(options);  // (n, n)
    b = torch::randn({n, n}).to(options);  // (n, n)
    product(a, b);                         // warm-up: thread pools, packing buffers
    const Clock::time_point start = Clock::now();
    product(a, b);
    speed.size = n;
    if (n >= 1024 || seconds_since(start) >= 0.1)
      break;
  }
  const Clock::time_point start = Clock::now();
  do {
    product(a, b);
    ++speed.products;
    speed.seconds = seconds_since(start);
  } while (speed.seconds < seconds);
  const double n = static_cast<double>(speed.size);
  speed.gflops = 2.0 * n * n * n * static_cast<double>(speed.products) / speed.seconds / 1e9;
  return speed;
}

}  // namespace bigbatch
