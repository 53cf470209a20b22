// The highest share of the bf16 GEMM peak a training pass of bench/compare's bf16 models could
// reach if nothing but its matrix products took time. Every Linear's three products (forward,
// input gradient, weight gradient) are timed at the model's shapes in every layout of their
// operands (plain or a transposed view; the weight gradient also as its transpose), each on the
// process's OpenMP threads, split by rows over them and two of them side by side, one thread each,
// and the fastest counts. Attention's two batched products are counted at the GEMM peak itself.
// FLOPs are counted as bench/peer.py counts them (docs/BENCHMARKS.md).
//   cmake --build build --target bigbatch_bench_bf16_ceiling
//   build/bigbatch_bench_bf16_ceiling [reps]
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bigbatch/nn/row_split_products.h"
#include "timing.h"

namespace {

using bigbatch::bench::median;
using bigbatch::bench::time_ms;
using torch::Tensor;

/// A Linear of `inputs` -> `outputs` features, `count` of them in the model.
struct LinearShape {
  const char* what;
  int64_t inputs, outputs;
  int count;
};

/// Samples a micro-batch, as bench/compare's 8 x 8 configurations run.
constexpr int64_t kMicroBatch = 8;

/// A model as bench/compare trains it at micro-batch 8.
struct ModelShape {
  const char* config;  ///< bench/compare's configuration
  int64_t context;     ///< tokens of a sample
  int64_t layers;      ///< attention layers
  int64_t width;       ///< attention's heads x head size
  std::vector<LinearShape> linears;
  /// Tokens of a micro-batch: the products' rows.
  int64_t rows() const { return kMicroBatch * context; }
};

/// A GPT of `layers` pre-LN blocks of `width` (feed-forward 4x) on bytes (vocabulary 256).
ModelShape gpt(const char* config, int64_t width, int64_t context, int64_t layers) {
  return {config,
          context,
          layers,
          width,
          {{"qkv", width, 3 * width, int(layers)},
           {"proj", width, width, int(layers)},
           {"fc", width, 4 * width, int(layers)},
           {"fc proj", 4 * width, width, int(layers)},
           {"head", width, 256, 1}}};
}

/// A Llama of `layers` layers of `width`, keys and values `kv_width` wide, feed-forward `inner`,
/// vocabulary 512 (make_bench_models.py's).
ModelShape llama(const char* config, int64_t width, int64_t kv_width, int64_t inner,
                 int64_t layers) {
  return {config,
          128,
          layers,
          width,
          {{"q, o", width, width, int(2 * layers)},
           {"k, v", width, kv_width, int(2 * layers)},
           {"gate, up", width, inner, int(2 * layers)},
           {"down", inner, width, int(layers)},
           {"head", width, 512, 1}}};
}

/// GFLOP/s of `run` (`flop` a call) from its median time over `reps` calls on `threads` OpenMP
/// threads, after one untimed call.
double rate(double flop, int reps, int threads, const std::function<void()>& run) {
  at::set_num_threads(threads);
  run();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i)
    ms.push_back(time_ms(run));
  return flop / median(ms) / 1e6;
}

/// (rows, depth) in bf16, plain or as a transposed view of a (depth, rows) tensor.
Tensor operand(int64_t rows, int64_t depth, bool transposed) {
  return transposed ? torch::randn({depth, rows}).to(torch::kBFloat16).t()
                    : torch::randn({rows, depth}).to(torch::kBFloat16);
}

/// The best rate of an (n, k) x (k, m) product over its operands' layouts and three ways to run
/// it: on the OpenMP threads (oneDNN's own threading), split by rows over them
/// (nn::split_product_into) and two of them side by side, one thread each (nn::gemms_side_by_side).
double best_rate(int64_t n, int64_t k, int64_t m, int reps, int threads) {
  const double flop = 2.0 * double(n) * double(k) * double(m);
  double best = 0;
  for (const bool a_t : {false, true}) {
    for (const bool b_t : {false, true}) {
      const Tensor a = operand(n, k, a_t), b = operand(m, k, !b_t).t();  // b (k, m)
      const Tensor other_a = operand(n, k, a_t), other_b = operand(m, k, !b_t).t();
      Tensor out = torch::empty({n, m}, a.options());
      best = std::max(best, rate(flop, reps, threads, [&] { at::mm_out(out, a, b); }));
      if (bigbatch::nn::split_product_into(out, a, b, /*accumulate=*/false))
        best = std::max(best, rate(flop, reps, threads, [&] {
                          bigbatch::nn::split_product_into(out, a, b, /*accumulate=*/false);
                        }));
      best = std::max(best, rate(2 * flop, reps, threads, [&] {
                        bigbatch::nn::gemms_side_by_side({{a, b}, {other_a, other_b}});
                      }));
    }
  }
  return best;
}

/// The bf16 GEMM peak as bench/peer.py's gemm_peak measures it: the best of n^3, n = 1024, 2048.
double gemm_peak(int threads) {
  double best = 0;
  for (const int64_t n : {1024, 2048}) {
    const Tensor a = operand(n, n, false), b = operand(n, n, false);
    best = std::max(best, rate(2.0 * n * n * n, 20, threads, [&] { at::mm(a, b); }));
  }
  return best;
}

void report(const ModelShape& model, double peak, int reps, int threads) {
  double flop = 0, seconds = 0;
  std::printf("\n%s: %lld rows a micro-batch\n", model.config,
              static_cast<long long>(model.rows()));
  std::printf("%-12s %11s | %8s %8s %8s | ms a pass\n", "Linear", "in x out", "forward", "input g.",
              "weight g.");
  for (const LinearShape& linear : model.linears) {
    const int64_t n = model.rows(), in = linear.inputs, out = linear.outputs;
    const double product = 2.0 * double(n) * double(in) * double(out);
    const double forward = best_rate(n, in, out, reps, threads);
    const double input_grad = best_rate(n, out, in, reps, threads);
    const double weight_grad =
        std::max(best_rate(out, n, in, reps, threads), best_rate(in, n, out, reps, threads));
    const double linear_seconds =
        linear.count * product * (1 / forward + 1 / input_grad + 1 / weight_grad) / 1e9;
    flop += linear.count * 3 * product;
    seconds += linear_seconds;
    std::printf("%-12s %5lld x %4lld | %8.0f %8.0f %8.0f | %7.3f (x %d)\n", linear.what,
                static_cast<long long>(in), static_cast<long long>(out), forward, input_grad,
                weight_grad, linear_seconds * 1e3, linear.count);
  }
  // Scores q k^T and probabilities x v, forward and backward (3 x), full T x T as peer.py counts.
  const double attention =
      3.0 * 2 * 2 * model.layers * model.rows() * model.context * double(model.width);
  flop += attention;
  seconds += attention / (peak * 1e9);
  const double ceiling = flop / seconds / 1e9;
  std::printf(
      "%.2f GFLOP a pass (attention %.2f, counted at the peak): %.1f ms at best, %.0f "
      "GFLOP/s, %.1f%% of the bf16 peak\n",
      flop / 1e9, attention / 1e9, seconds * 1e3, ceiling, 100 * ceiling / peak);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  torch::manual_seed(0);
  const torch::NoGradGuard no_grad;
  const int threads = at::get_num_threads();
  bigbatch::nn::set_row_split(bigbatch::nn::RowSplit::kAlways);
  // bench/compare's bf16 configurations at 8 x 8 (configs/gpt.toml; make_bench_models.py).
  const std::vector<ModelShape> models = {
      gpt("gpt-bf16", 128, 64, 4),
      gpt("gpt-wide-bf16", 512, 256, 4),
      llama("llama-bf16", 384, 128, 1024, 6),
      llama("llama30m-bf16", 576, 192, 1536, 8),
  };
  const double peak = gemm_peak(threads);
  std::printf("bf16 GEMM peak %.0f GFLOP/s (best of 1024^3 and 2048^3), OpenMP %d, medians of %d\n",
              peak, threads, reps);
  std::printf(
      "1024^3 and 2048^3 at their best (layouts, by rows, side by side): %.0f, %.0f GFLOP/s\n",
      best_rate(1024, 1024, 1024, reps, threads), best_rate(2048, 2048, 2048, reps, threads));
  std::printf("rates in GFLOP/s: the best of every layout on the threads, by rows, side by side\n");
  for (const ModelShape& model : models)
    report(model, peak, reps, threads);
  return 0;
}
