// Times float32 products on LibTorch's BLAS (at::mm: MKL in the wheel) against oneDNN's float32
// kernels (nn/fp32_matmul) at the shapes of bench/compare's models, the two alternating call by
// call so that the machine's drift falls on both, at the process's OpenMP threads and at one (a
// pass of two at once). Prints GFLOP/s (medians) and the largest difference between the two
// results relative to the largest magnitude.
//   cmake --build build --target bigbatch_bench_fp32_products
//   build/bigbatch_bench_fp32_products [reps]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bigbatch/nn/fp32_matmul.h"
#include "product_shape.h"
#include "timing.h"

namespace {

using bigbatch::bench::median;
using bigbatch::bench::time_ms;
using torch::Tensor;

using Shape = bigbatch::bench::ProductShape;

void time_shape(const Shape& shape, int reps) {
  const Tensor a = shape.a(torch::kFloat);  // (n, k)
  const Tensor b = shape.b(torch::kFloat);  // (k, m)
  Tensor blas = torch::empty({shape.n, shape.m}), onednn = torch::empty({shape.n, shape.m});
  const auto run_blas = [&] { at::mm_out(blas, a, b); };
  const auto run_onednn = [&] { onednn = bigbatch::nn::onednn_mm(a, b); };
  run_blas();
  run_onednn();
  std::vector<double> blas_ms, onednn_ms;
  for (int i = 0; i < reps; ++i) {
    blas_ms.push_back(time_ms(run_blas));
    onednn_ms.push_back(time_ms(run_onednn));
  }
  const double flop = shape.flop();
  const double scale = blas.abs().max().item<double>();
  const double difference = (blas - onednn).abs().max().item<double>() / scale;
  std::printf("%-34s %5lld x %5lld x %5lld %-5s | %7.1f | %7.1f | %5.2fx | %.1e\n", shape.what,
              static_cast<long long>(shape.n), static_cast<long long>(shape.k),
              static_cast<long long>(shape.m), shape.layout(), flop / median(blas_ms) / 1e6,
              flop / median(onednn_ms) / 1e6, median(blas_ms) / median(onednn_ms), difference);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  if (!bigbatch::nn::onednn_fp32_available()) {
    std::fprintf(stderr, "oneDNN's float32 kernels are not available here\n");
    return 1;
  }
  torch::manual_seed(0);
  const torch::NoGradGuard no_grad;
  // Llama 6 x 384 (MLP 1024) and Llama 8 x 576 (MLP 1536, keys and values 192 wide) at 8 x 128
  // tokens; the default GPT (width 128) at 8 x 64 tokens.
  const std::vector<Shape> shapes = {
      {"square", 1024, 1024, 1024, false, false},
      {"Llama q/o projection", 1024, 384, 384, false, true},
      {"Llama gate/up projection", 1024, 384, 1024, false, true},
      {"Llama down projection", 1024, 1024, 384, false, true},
      {"Llama gate/up input gradient", 1024, 1024, 384, false, false},
      {"Llama gate/up weight gradient", 1024, 1024, 384, true, false},
      {"Llama down weight gradient", 384, 1024, 1024, true, false},
      {"Llama-30m q/o projection", 1024, 576, 576, false, true},
      {"Llama-30m k/v projection", 1024, 576, 192, false, true},
      {"Llama-30m gate/up projection", 1024, 576, 1536, false, true},
      {"Llama-30m down projection", 1024, 1536, 576, false, true},
      {"Llama-30m gate/up input gradient", 1024, 1536, 576, false, false},
      {"Llama-30m gate/up weight gradient", 1536, 1024, 576, true, false},
      {"Llama-30m down weight gradient", 576, 1024, 1536, true, false},
      {"GPT qkv projection", 512, 128, 384, false, true},
      {"GPT fc weight gradient", 512, 512, 128, true, false},
  };
  for (const int threads : {torch::get_num_threads(), 1}) {
    torch::set_num_threads(threads);
    std::printf(
        "OpenMP %d | n x k x m | BLAS GFLOP/s | oneDNN GFLOP/s | BLAS time / oneDNN's | "
        "difference\n",
        threads);
    for (const Shape& shape : shapes)
      time_shape(shape, reps);
  }
  return 0;
}
