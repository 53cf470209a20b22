// Times the feed-forward network's bf16 GELU backward with the fc bias gradient: in two passes
// (bf16_gelu_backward, then bf16_column_sums of its result) against one
// (bf16_gelu_backward_with_column_sums), alternating call by call so that the machine's drift
// falls on both, at the (N, I) of bench/compare's GPT (8 x 64 tokens, MLP 512) and of its
// width-512 GPT (8 x 256 tokens, MLP 2048); also the forward, bf16_gelu, and ATen's computed
// forward and backward (at::gelu_out, at::gelu_backward_out) beside the tables' lookups, with
// whether each gives the tables' values bitwise.
//   cmake --build build --target bigbatch_bench_bf16_gelu && build/bigbatch_bench_bf16_gelu [reps]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bigbatch/nn/gelu_kernels.h"
#include "bigbatch/nn/layer_norm_kernels.h"
#include "timing.h"

namespace {

using bigbatch::bench::median;
using bigbatch::bench::time_ms;
using torch::Tensor;

at::BFloat16* bits(const Tensor& t) {
  return t.data_ptr<at::BFloat16>();
}

}  // namespace

int main(int argc, char** argv) {
  namespace kernels = bigbatch::nn::kernels;
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  std::printf("OpenMP threads %d, %d repetitions, median ms\n", at::get_num_threads(), reps);
  const std::pair<int64_t, int64_t> shapes[] = {{512, 512}, {2048, 2048}};
  for (const auto& [rows, channels] : shapes) {
    torch::manual_seed(rows);
    const Tensor pre = (2 * torch::randn({rows, channels})).to(torch::kBFloat16);  // (N, I)
    const Tensor grad = torch::randn({rows, channels}).to(torch::kBFloat16);       // (N, I)
    const Tensor out = torch::empty_like(pre), sums = torch::empty({channels});
    Tensor computed = torch::empty_like(pre);
    std::vector<double> forward, two_passes, one_pass, aten_forward, aten_backward, backward;
    for (int rep = 0; rep < reps; ++rep) {
      forward.push_back(time_ms([&] { kernels::bf16_gelu(bits(pre), bits(out), pre.numel()); }));
      aten_forward.push_back(time_ms([&] { at::gelu_out(computed, pre); }));
      backward.push_back(time_ms(
          [&] { kernels::bf16_gelu_backward(bits(grad), bits(pre), bits(out), pre.numel()); }));
      aten_backward.push_back(time_ms([&] { at::gelu_backward_out(computed, grad, pre); }));
      two_passes.push_back(time_ms([&] {
        kernels::bf16_gelu_backward(bits(grad), bits(pre), bits(out), pre.numel());
        kernels::bf16_column_sums(bits(out), {rows, channels}, sums.data_ptr<float>());
      }));
      one_pass.push_back(time_ms([&] {
        kernels::bf16_gelu_backward_with_column_sums(bits(grad), bits(pre), bits(out),
                                                     {rows, channels}, sums.data_ptr<float>());
      }));
    }
    std::printf(
        "(%ld, %ld): forward %.4f, backward + column sums in two passes %.4f, in one %.4f\n",
        long(rows), long(channels), median(forward), median(two_passes), median(one_pass));
    kernels::bf16_gelu(bits(pre), bits(out), pre.numel());
    const bool forward_same = torch::equal(at::gelu(pre), out);
    kernels::bf16_gelu_backward(bits(grad), bits(pre), bits(out), pre.numel());
    const bool backward_same = torch::equal(at::gelu_backward(grad, pre), out);
    std::printf(
        "(%ld, %ld): tables forward %.4f, backward %.4f; ATen computed forward %.4f (%s), "
        "backward %.4f (%s)\n",
        long(rows), long(channels), median(forward), median(backward), median(aten_forward),
        forward_same ? "bitwise the tables'" : "NOT the tables' values", median(aten_backward),
        backward_same ? "bitwise the tables'" : "NOT the tables' values");
  }
  return 0;
}
