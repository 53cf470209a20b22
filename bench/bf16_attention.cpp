// Times one GPT block's attention in bf16, forward + backward, as the fused block runs it: the
// bf16 attention kernels (nn/bf16_attention.h) reading q, k, v from the qkv product's columns,
// their products on vdpbf16ps and, where the CPU has AMX, on tiles,
// against the composite (the head-major copy, baddbmm with the mask, softmax, bmm, and their
// backward with the copies back), alternating call by call so that the machine's drift falls on
// both (each side then starts from caches the other filled); then the kernels alone, call after
// call into the same outputs, forward and backward timed apart. Default shape: bench/compare's
// GPT (8 x 64 tokens, 4 heads of 32).
//   cmake --build build --target bigbatch_bench_bf16_attention
//   build/bigbatch_bench_bf16_attention [reps] [batch time heads head_dim]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bigbatch/nn/bf16_attention.h"
#include "timing.h"

namespace {

using bigbatch::bench::median;
using bigbatch::bench::time_ms;
using torch::Tensor;

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  const int64_t batch = argc > 5 ? std::atoll(argv[2]) : 8,
                time = argc > 5 ? std::atoll(argv[3]) : 64;
  const int64_t heads = argc > 5 ? std::atoll(argv[4]) : 4,
                dim = argc > 5 ? std::atoll(argv[5]) : 32;
  if (!bigbatch::nn::bf16_attention_available()) {
    std::fprintf(stderr, "this CPU has no avx512_bf16: nothing to time\n");
    return 1;
  }
  const int64_t embed = heads * dim, rows = batch * time;
  const double scale = 1.0 / std::sqrt(double(dim));
  torch::manual_seed(0);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const Tensor qkv = torch::randn({rows, 3 * embed}, bf16);  // the qkv product's output
  const Tensor d_out = torch::randn({rows, embed}, bf16);    // the gradient of y (N, C)
  const Tensor mask = torch::zeros({time, time}, bf16)
                          .masked_fill_(torch::ones({time, time}, torch::kBool).triu(1),
                                        -std::numeric_limits<double>::infinity())
                          .expand({batch * heads, time, time});
  const auto columns = [&](const Tensor& t, int64_t which) {  // (N, 3C) -> (B, H, T, D)
    return t.view({batch, time, 3, heads, dim}).select(2, which).permute({0, 2, 1, 3});
  };
  const auto by_head = [&](const Tensor& t) {  // (N, C) -> (B, H, T, D)
    return t.view({batch, time, heads, dim}).permute({0, 2, 1, 3});
  };

  const auto kernels_on = [&](bool amx) {
    bigbatch::nn::Bf16AttentionInputs in{
        columns(qkv, 0), columns(qkv, 1), columns(qkv, 2), {true, {}}, scale};
    in.use_amx = amx;
    const Tensor y = torch::empty({rows, embed}, bf16);
    const Tensor probs = bigbatch::nn::bf16_attention_forward(in, by_head(y));
    const Tensor d_qkv = torch::empty({rows, 3 * embed}, bf16);
    bigbatch::nn::bf16_attention_backward(
        in, probs, by_head(d_out), {columns(d_qkv, 0), columns(d_qkv, 1), columns(d_qkv, 2)});
  };
  const bool amx = bigbatch::nn::bf16_attention_amx_runs(dim);
  const std::function<void()> kernels = [&] { kernels_on(false); };
  const std::function<void()> amx_kernels = [&] { kernels_on(true); };
  const std::function<void()> composite = [&] {  // as nn/fused_block.cpp's composite path
    const Tensor split = qkv.view({batch, time, 3, heads, dim})
                             .permute({2, 0, 3, 1, 4})
                             .contiguous()
                             .view({3, batch * heads, time, dim});
    const Tensor q = split[0], k = split[1], v = split[2];
    const Tensor probs = at::_softmax(at::baddbmm(mask, q, k.transpose(1, 2), 1, scale), -1, false);
    const Tensor y = at::bmm(probs, v)
                         .view({batch, heads, time, dim})
                         .permute({0, 2, 1, 3})
                         .reshape({rows, embed});
    const Tensor d_attended = d_out.view({batch, time, heads, dim})
                                  .permute({0, 2, 1, 3})
                                  .reshape({batch * heads, time, dim});
    const Tensor d_split = at::empty_like(split);
    Tensor dq = d_split[0], dk = d_split[1], dv = d_split[2];
    at::bmm_out(dv, probs.transpose(1, 2), d_attended);
    Tensor d_scores = at::_softmax_backward_data(at::bmm(d_attended, v.transpose(1, 2)), probs, -1,
                                                 torch::kBFloat16);
    d_scores.mul_(scale);
    at::bmm_out(dq, d_scores, k);
    at::bmm_out(dk, d_scores.transpose(1, 2), q);
    const Tensor d_qkv = d_split.view({3, batch, heads, time, dim})
                             .permute({1, 3, 0, 2, 4})
                             .reshape({rows, 3 * embed});
  };

  std::vector<double> fused_ms, amx_ms, composite_ms;
  for (int rep = 0; rep < reps; ++rep) {
    fused_ms.push_back(time_ms(kernels));
    if (amx)
      amx_ms.push_back(time_ms(amx_kernels));
    composite_ms.push_back(time_ms(composite));
  }
  const double flops = 4.0 * 3.0 * double(batch * heads) * double(time * time * dim);
  std::printf("%d threads, B %ld T %ld H %ld D %ld, causal, forward + backward, %d repetitions\n",
              at::get_num_threads(), long(batch), long(time), long(heads), long(dim), reps);
  std::printf("bf16 attention kernels %8.3f ms (%6.1f GFLOP/s of the full products), vdpbf16ps\n",
              median(fused_ms), flops / median(fused_ms) / 1e6);
  if (amx)
    std::printf("bf16 attention kernels %8.3f ms (%6.1f GFLOP/s), products on AMX tiles\n",
                median(amx_ms), flops / median(amx_ms) / 1e6);
  else
    std::printf("(no AMX products: %s)\n", bigbatch::nn::bf16_attention_amx_available()
                                               ? "the head dimension is not a multiple of 32"
                                               : "this CPU has no amx_bf16");
  std::printf("composite              %8.3f ms (%6.1f GFLOP/s)\n", median(composite_ms),
              flops / median(composite_ms) / 1e6);

  // The kernels alone (on tiles where they run there), one call after another into the same y
  // and d qkv, as a training step calls them between its products.
  bigbatch::nn::Bf16AttentionInputs in{
      columns(qkv, 0), columns(qkv, 1), columns(qkv, 2), {true, {}}, scale};
  in.use_amx = amx;
  const Tensor y = torch::empty({rows, embed}, bf16), d_qkv = torch::empty({rows, 3 * embed}, bf16);
  Tensor probs;
  std::vector<double> forward_ms, backward_ms;
  for (int rep = 0; rep < reps; ++rep) {
    forward_ms.push_back(
        time_ms([&] { probs = bigbatch::nn::bf16_attention_forward(in, by_head(y)); }));
    backward_ms.push_back(time_ms([&] {
      bigbatch::nn::bf16_attention_backward(
          in, probs, by_head(d_out), {columns(d_qkv, 0), columns(d_qkv, 1), columns(d_qkv, 2)});
    }));
  }
  std::printf("kernels alone (%s): forward %.3f ms, backward %.3f ms\n",
              amx ? "AMX tiles" : "vdpbf16ps", median(forward_ms), median(backward_ms));
  return 0;
}
