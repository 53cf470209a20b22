// Times bf16 products unsplit (oneDNN's own threading, at::mm) against split by rows over the
// threads (nn/row_split_products, model.row_split = "always"), at the shapes of bench/compare's
// Llamas and width-512 GPT, the two alternating call by call. Prints GFLOP/s (medians) of the
// unsplit product on 1 thread and on the process's OpenMP threads, of the split one, the split's
// speed-up and whether its result was bitwise the unsplit one's: what auto decides on (the 1-thread
// products run first, on their own).
//   cmake --build build --target bigbatch_bench_row_split
//   build/bigbatch_bench_row_split [reps]
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bigbatch/nn/row_split_products.h"
#include "product_shape.h"
#include "timing.h"

namespace {

using bigbatch::bench::median;
using bigbatch::bench::time_ms;
using torch::Tensor;

using Shape = bigbatch::bench::ProductShape;

void time_shape(const Shape& shape, int reps, int threads) {
  const Tensor a = shape.a(torch::kBFloat16);  // (n, k)
  const Tensor b = shape.b(torch::kBFloat16);  // (k, m)
  Tensor unsplit = torch::empty({shape.n, shape.m}, a.options());
  const Tensor split = torch::empty({shape.n, shape.m}, a.options());
  const auto run_unsplit = [&] { at::mm_out(unsplit, a, b); };
  bool splits = true;
  const auto run_split = [&] {
    splits = bigbatch::nn::split_product_into(split, a, b, /*accumulate=*/false);
  };
  std::vector<double> one_ms, unsplit_ms, split_ms;
  at::set_num_threads(1);
  run_unsplit();
  for (int i = 0; i < reps; ++i)
    one_ms.push_back(time_ms(run_unsplit));
  at::set_num_threads(threads);
  run_split();
  run_unsplit();
  for (int i = 0; i < reps; ++i) {
    unsplit_ms.push_back(time_ms(run_unsplit));
    split_ms.push_back(time_ms(run_split));
  }
  const double flop = shape.flop();
  const std::string split_rate =
      splits ? std::to_string(std::lround(flop / median(split_ms) / 1e6)) : "-";
  const std::string speedup =
      splits ? std::to_string(median(unsplit_ms) / median(split_ms)).substr(0, 4) + "x" : "-";
  std::printf("%-32s %5lld x %5lld x %5lld %-3s | %5ld | %5ld | %5s | %5s | %s\n", shape.what,
              static_cast<long long>(shape.n), static_cast<long long>(shape.k),
              static_cast<long long>(shape.m), shape.layout(),
              std::lround(flop / median(one_ms) / 1e6),
              std::lround(flop / median(unsplit_ms) / 1e6), split_rate.c_str(), speedup.c_str(),
              !splits ? "not split (a^T)" : (torch::equal(split, unsplit) ? "yes" : "no"));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  torch::manual_seed(0);
  const torch::NoGradGuard no_grad;
  bigbatch::nn::set_row_split(bigbatch::nn::RowSplit::kAlways);
  const int threads = at::get_num_threads();
  // The 30M Llama (576 wide, keys and values 192, MLP 1536) and the 9.8M one (384, MLP 1024) at
  // 8 x 128 tokens; the width-512 GPT at 8 x 256 tokens.
  const std::vector<Shape> shapes = {
      {"Llama-30m q/o projection", 1024, 576, 576, false, true},
      {"Llama-30m k/v projection", 1024, 576, 192, false, true},
      {"Llama-30m gate/up projection", 1024, 576, 1536, false, true},
      {"Llama-30m down projection", 1024, 1536, 576, false, true},
      {"Llama-30m q/o input gradient", 1024, 576, 576, false, false},
      {"Llama-30m k/v input gradient", 1024, 192, 576, false, false},
      {"Llama-30m gate/up input gradient", 1024, 1536, 576, false, false},
      {"Llama-30m down input gradient", 1024, 576, 1536, false, false},
      {"Llama-30m q/o weight gradient", 576, 1024, 576, true, false},
      {"Llama-30m gate/up weight grad.", 576, 1024, 1536, false, false},
      {"Llama q/o projection", 1024, 384, 384, false, true},
      {"Llama down projection", 1024, 1024, 384, false, true},
      {"Llama gate/up input gradient", 1024, 1024, 384, false, false},
      {"GPT-512 qkv projection", 2048, 512, 1536, false, true},
      {"GPT-512 output projection", 2048, 512, 512, false, true},
      {"GPT-512 fc input gradient", 2048, 2048, 512, false, false},
  };
  std::printf("bf16 products, GFLOP/s (medians of %d), OpenMP %d\n", reps, threads);
  std::printf("%-32s %-25s | 1 thr | unspl | split | split/unsplit | bitwise\n", "product",
              "n x k x m");
  for (const Shape& shape : shapes)
    time_shape(shape, reps, threads);
  return 0;
}
