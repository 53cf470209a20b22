// Times the Llama's element-wise steps (nn/llama_ops) fused and composite, forward + backward at
// the shapes of bench/compare's Llama (8 x 128 tokens, width 384, 6 heads on 2 key heads, MLP
// 1024), the two alternating call by call so that the machine's drift falls on both; SwiGLU and
// the rotary embeddings also on bf16 projections, as under bf16 autocast. Also the composite
// attention on grouped keys against keys repeated per query head.
//   cmake --build build --target bigbatch_bench_llama_ops && build/bigbatch_bench_llama_ops [reps]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/llama_ops.h"
#include "timing.h"

namespace {

using bigbatch::bench::median;
using bigbatch::bench::time_ms;
using bigbatch::nn::BlockKernel;
using torch::Tensor;

/// Forward, then backward with a gradient of ones.
void forward_backward(const Tensor& y) {
  y.backward(torch::ones_like(y));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 60;
  constexpr int64_t kBatch = 8, kTime = 128, kWidth = 384, kInner = 1024, kHeads = 6, kKeyHeads = 2,
                    kHeadDim = 64;
  torch::manual_seed(0);
  const Tensor x = torch::randn({kBatch, kTime, kWidth}).requires_grad_();
  const Tensor weight = (torch::rand({kWidth}) + 0.5).requires_grad_();
  const Tensor gate = torch::randn({kBatch, kTime, kInner}).requires_grad_();
  const Tensor up = torch::randn({kBatch, kTime, kInner}).requires_grad_();
  const Tensor q_proj = torch::randn({kBatch, kTime, kHeads * kHeadDim}).requires_grad_();
  const Tensor k_proj = torch::randn({kBatch, kTime, kKeyHeads * kHeadDim}).requires_grad_();
  const Tensor v_proj = torch::randn({kBatch, kTime, kKeyHeads * kHeadDim}).requires_grad_();
  const Tensor angles = torch::rand({kTime, kHeadDim}) * 6.0;
  const Tensor cos = angles.cos(), sin = angles.sin();
  const auto heads = [&](const Tensor& t, int64_t n) {  // (B, T, n*D) -> (B, n, T, D)
    return t.view({kBatch, kTime, n, kHeadDim}).transpose(1, 2);
  };
  const auto repeated = [&](const Tensor& t) {  // (B, KV, T, D) -> (B, H, T, D)
    return t.unsqueeze(2)
        .expand({kBatch, kKeyHeads, kHeads / kKeyHeads, kTime, kHeadDim})
        .reshape({kBatch, kHeads, kTime, kHeadDim});
  };
  const bigbatch::nn::AttentionMask causal{true, {}};

  struct Step {
    std::string name;
    std::function<void()> fused, composite;
  };
  const auto by_setting = [](const std::function<void()>& run) {
    return std::pair<std::function<void()>, std::function<void()>>{
        [run] {
          bigbatch::nn::set_block_kernel(BlockKernel::kAuto);
          run();
        },
        [run] {
          bigbatch::nn::set_block_kernel(BlockKernel::kComposite);
          run();
        }};
  };
  std::vector<Step> steps;
  const auto add = [&](const std::string& name, const std::function<void()>& run) {
    auto [fused, composite] = by_setting(run);
    steps.push_back({name, fused, composite});
  };
  add("RMSNorm (8 x 128, 384)", [&] { forward_backward(bigbatch::nn::rms_norm(x, weight, 1e-5)); });
  add("SwiGLU (8 x 128, 1024)", [&] { forward_backward(bigbatch::nn::swiglu(gate, up)); });
  add("rotary q and k (6 + 2 heads of 64)", [&] {
    const Tensor q = bigbatch::nn::rotary_embedding(q_proj, cos, sin, kHeads);
    const Tensor k = bigbatch::nn::rotary_embedding(k_proj, cos, sin, kKeyHeads);
    (q.sum() + k.sum()).backward();
  });
  // Under bf16 autocast the projections are bf16 and cos and sin stay float32.
  const auto bf16_leaf = [](const Tensor& t) {
    return t.detach().to(torch::kBFloat16).requires_grad_();
  };
  const Tensor gate_bf16 = bf16_leaf(gate), up_bf16 = bf16_leaf(up);
  const Tensor q_bf16 = bf16_leaf(q_proj), k_bf16 = bf16_leaf(k_proj);
  add("SwiGLU in bf16", [&] { forward_backward(bigbatch::nn::swiglu(gate_bf16, up_bf16)); });
  add("rotary q and k in bf16 (float32 out)", [&] {
    const Tensor q = bigbatch::nn::rotary_embedding(q_bf16, cos, sin, kHeads);
    const Tensor k = bigbatch::nn::rotary_embedding(k_bf16, cos, sin, kKeyHeads);
    (q.sum() + k.sum()).backward();
  });
  steps.push_back({"attention, 2 key heads: grouped (fused column) / repeated",
                   [&] {
                     forward_backward(bigbatch::nn::scaled_dot_product_attention(
                         heads(q_proj, kHeads), heads(k_proj, kKeyHeads), heads(v_proj, kKeyHeads),
                         causal, 0.0, true));
                   },
                   [&] {
                     forward_backward(bigbatch::nn::scaled_dot_product_attention(
                         heads(q_proj, kHeads), repeated(heads(k_proj, kKeyHeads)),
                         repeated(heads(v_proj, kKeyHeads)), causal, 0.0, true));
                   }});

  bigbatch::nn::set_attention_kernel(bigbatch::nn::AttentionKernel::kComposite, "bench");
  std::printf("%d threads, %d repetitions each, forward + backward, median ms\n",
              at::get_num_threads(), reps);
  std::printf("%-58s %9s %11s\n", "step", "fused", "composite");
  for (const Step& step : steps) {
    std::vector<double> fused, composite;
    for (int rep = 0; rep < reps; ++rep) {
      fused.push_back(time_ms(step.fused));
      composite.push_back(time_ms(step.composite));
    }
    std::printf("%-58s %9.3f %11.3f\n", step.name.c_str(), median(fused), median(composite));
  }
  return 0;
}
