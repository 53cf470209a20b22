#include "bigbatch/nn/fused_batch_norm.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigbatch/nn/concurrent_forward.h"
#include "bigbatch/nn/norm.h"
#include "bigbatch/nn/recompute.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

using bigbatch::testing::expect_contains;
using bigbatch::testing::input_error_of;

/// max |a - b| / max(1, max |b|), in float64.
double relative_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor wide = b.to(torch::kFloat64);
  const double scale = std::max(1.0, wide.abs().max().item<double>());
  return (a.to(torch::kFloat64) - wide).abs().max().item<double>() / scale;
}

/// A (B, C, H, W) tensor in channels-last memory, or (B, C) when H is 0.
torch::Tensor rows_tensor(int64_t batch, int64_t channels, int64_t height, double offset) {
  if (height == 0)
    return torch::randn({batch, channels}) * 2.0 + offset;
  return (torch::randn({batch, channels, height, height + 1}) * 2.0 + offset)
      .contiguous(torch::MemoryFormat::ChannelsLast);
}

/// The separate operations in float64: batch_norm in training, + residual, ReLU.
torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, const torch::Tensor& residual, bool relu) {
  torch::Tensor y = torch::batch_norm(x, weight, bias, {}, {}, /*training=*/true, 0.1, 1e-5,
                                      /*cudnn_enabled=*/false);
  if (residual.defined())
    y = y + residual;
  return relu ? torch::relu(y) : y;
}

/// The separate operations in float64 on copies of the given values, run forward and backward
/// against `upstream`: the copies hold their gradients.
struct Float64Run {
  torch::Tensor x, weight, bias, residual, output;
};
Float64Run float64_run(const torch::Tensor& x, const torch::Tensor& weight,
                       const torch::Tensor& bias, const torch::Tensor& residual, bool relu,
                       const torch::Tensor& upstream) {
  const auto wide = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().to(torch::kFloat64).requires_grad_() : torch::Tensor();
  };
  Float64Run run{wide(x), wide(weight), wide(bias), wide(residual), {}};
  run.output = reference(run.x, run.weight, run.bias, run.residual, relu);
  (run.output * upstream.to(torch::kFloat64)).sum().backward();
  return run;
}

struct Case {
  int64_t batch, channels, height;  // height 0: (B, C)
  bool residual, relu;
};

std::string describe(const Case& c) {
  return std::to_string(c.batch) + "x" + std::to_string(c.channels) + "x" +
         std::to_string(c.height) + (c.residual ? " +residual" : "") + (c.relu ? " relu" : "");
}

TEST(FusedBatchNorm, MatchesTheSeparateOperationsInFloat64WithEveryGradient) {
  // 16, 32 and 64 channels run the kernels' fixed-width loops, 5 and 24 the generic ones; the
  // sizes cover one row chunk, several, and a last chunk that is not full.
  const std::vector<Case> cases = {{4, 16, 7, true, true},   {3, 32, 5, false, true},
                                   {2, 64, 9, true, false},  {5, 5, 3, true, true},
                                   {70, 24, 0, false, true}, {9, 16, 0, true, true},
                                   {2, 64, 0, false, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    torch::manual_seed(c.channels + c.height);
    const torch::Tensor x = rows_tensor(c.batch, c.channels, c.height, 0.7).requires_grad_();
    const torch::Tensor weight = (torch::rand({c.channels}) + 0.5).requires_grad_();
    const torch::Tensor bias = torch::randn({c.channels}).requires_grad_();
    const torch::Tensor residual =
        c.residual ? rows_tensor(c.batch, c.channels, c.height, 0.0).requires_grad_()
                   : torch::Tensor();
    const torch::Tensor upstream = torch::randn(x.sizes());
    BatchNormEpilogue epilogue{residual, c.relu};
    ASSERT_TRUE(fused_batch_norm_supported(x, weight, bias, epilogue));
    const FusedBatchNorm fused = fused_batch_norm_train(x, weight, bias, 1e-5, epilogue);
    EXPECT_EQ(fused.output.sizes(), x.sizes());
    EXPECT_EQ(fused.output.strides(), x.strides());
    (fused.output * upstream).sum().backward();

    const Float64Run exact = float64_run(x, weight, bias, residual, c.relu, upstream);

    // LibTorch's own float32 kernels on the same values, for the error float32 allows: with
    // few values per channel the normalisation is ill-conditioned for both.
    const auto narrow = [](const torch::Tensor& t) {
      return t.defined() ? t.detach().clone().requires_grad_() : torch::Tensor();
    };
    const torch::Tensor x32 = narrow(x), weight32 = narrow(weight), bias32 = narrow(bias);
    const torch::Tensor y32 = reference(x32, weight32, bias32, narrow(residual), c.relu);
    (y32 * upstream).sum().backward();
    const auto bound = [](double floor, const torch::Tensor& libtorch, const torch::Tensor& wide) {
      return std::max(floor, 4.0 * relative_diff(libtorch, wide));
    };
    EXPECT_LT(relative_diff(fused.output, exact.output), bound(2e-6, y32, exact.output));
    EXPECT_LT(relative_diff(x.grad(), exact.x.grad()), bound(2e-5, x32.grad(), exact.x.grad()));
    EXPECT_LT(relative_diff(weight.grad(), exact.weight.grad()),
              bound(2e-5, weight32.grad(), exact.weight.grad()));
    EXPECT_LT(relative_diff(bias.grad(), exact.bias.grad()),
              bound(2e-5, bias32.grad(), exact.bias.grad()));
    if (c.residual) {
      EXPECT_LT(relative_diff(residual.grad(), exact.residual.grad()), 1e-6);
    }
    const torch::Tensor values =
        x.detach().to(torch::kFloat64).transpose(0, 1).reshape({c.channels, -1});  // (C, B*H*W)
    const torch::Tensor mean = values.mean(1);
    EXPECT_EQ(fused.count, values.size(1));
    EXPECT_LT(relative_diff(fused.mean, mean), 1e-6);
    EXPECT_LT(relative_diff(fused.m2, (values - mean.unsqueeze(1)).square().sum(1)), 1e-6);
  }
}

TEST(FusedBatchNorm, InBfloat16RoundsOnlyItsResultsOnce) {
  // What autocast hands the norm: bfloat16 activations, float32 weight and bias. Against float64
  // on the same bfloat16 values, the output and input gradient are off by one rounding to
  // bfloat16 (2^-8 of the largest value) and the float32 statistics and parameter gradients by
  // float32's. LibTorch's bfloat16 kernels, rounding after the norm and again after the add, are
  // further off: up to 0.28 on the input gradient of the first case, where that rounding flips
  // the ReLU's mask of a value near zero.
  const std::vector<Case> cases = {{4, 16, 7, true, true},
                                   {3, 32, 5, false, true},
                                   {2, 64, 9, true, false},
                                   {5, 5, 3, true, true},
                                   {70, 24, 0, false, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    torch::manual_seed(c.channels + c.height + 1);
    const auto bf16 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
    const torch::Tensor x = bf16(rows_tensor(c.batch, c.channels, c.height, 0.7)).requires_grad_();
    const torch::Tensor weight = (torch::rand({c.channels}) + 0.5).requires_grad_();
    const torch::Tensor bias = torch::randn({c.channels}).requires_grad_();
    const torch::Tensor residual =
        c.residual ? bf16(rows_tensor(c.batch, c.channels, c.height, 0.0)).requires_grad_()
                   : torch::Tensor();
    const torch::Tensor upstream = bf16(torch::randn(x.sizes()));
    BatchNormEpilogue epilogue{residual, c.relu};
    ASSERT_TRUE(fused_batch_norm_supported(x, weight, bias, epilogue));
    const FusedBatchNorm fused = fused_batch_norm_train(x, weight, bias, 1e-5, epilogue);
    EXPECT_EQ(fused.output.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(fused.output.strides(), x.strides());
    (fused.output * upstream).sum().backward();
    EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16);
    EXPECT_EQ(weight.grad().scalar_type(), torch::kFloat);

    const Float64Run exact = float64_run(x, weight, bias, residual, c.relu, upstream);
    EXPECT_LT(relative_diff(fused.output, exact.output), 3.9e-3);  // 2^-8
    EXPECT_LT(relative_diff(x.grad(), exact.x.grad()), 4.5e-3);
    EXPECT_LT(relative_diff(weight.grad(), exact.weight.grad()), 2e-6);
    EXPECT_LT(relative_diff(bias.grad(), exact.bias.grad()), 2e-6);
    if (c.residual) {
      EXPECT_EQ(residual.grad().scalar_type(), torch::kBFloat16);
      EXPECT_LT(relative_diff(residual.grad(), exact.residual.grad()), 1e-6);
    }
    const torch::Tensor values =
        x.detach().to(torch::kFloat64).transpose(0, 1).reshape({c.channels, -1});  // (C, B*H*W)
    const torch::Tensor mean = values.mean(1);
    EXPECT_LT(relative_diff(fused.mean, mean), 1e-6);
    EXPECT_LT(relative_diff(fused.m2, (values - mean.unsqueeze(1)).square().sum(1)), 1e-6);
  }
}

TEST(FusedBatchNorm, StatisticsOfALargeOffsetDoNotCancel) {
  torch::manual_seed(3);
  // Values 1e4 with a spread of 1e-1: a float sum of squares would lose the variance entirely,
  // and a chunk mean off by float32's rounding at 1e4 (1e-3) would add 1e-4 of it.
  const torch::Tensor x =
      (torch::randn({8, 16, 12, 12}) * 0.1 + 1e4).contiguous(torch::MemoryFormat::ChannelsLast);
  const FusedBatchNorm fused =
      fused_batch_norm_train(x, torch::ones({16}), torch::zeros({16}), 1e-5, {});
  const torch::Tensor values = x.to(torch::kFloat64).transpose(0, 1).reshape({16, -1});
  const torch::Tensor m2 = (values - values.mean(1, true)).square().sum(1);
  EXPECT_LT(((fused.m2 - m2).abs() / m2).max().item<double>(), 1e-5);
  EXPECT_LT(relative_diff(fused.mean, values.mean(1)), 1e-9);
}

TEST(FusedBatchNorm, IsDeterministicAndAgreesAcrossThreadCounts) {
  torch::manual_seed(5);
  const torch::Tensor x = rows_tensor(16, 32, 14, 0.3);  // 50K values: runs on every thread
  const torch::Tensor weight = torch::rand({32}) + 0.5;
  const torch::Tensor bias = torch::randn({32});
  const BatchNormEpilogue epilogue{torch::Tensor(), true};
  const FusedBatchNorm first = fused_batch_norm_train(x, weight, bias, 1e-5, epilogue);
  const FusedBatchNorm again = fused_batch_norm_train(x, weight, bias, 1e-5, epilogue);
  EXPECT_TRUE(torch::equal(first.output, again.output));
  EXPECT_TRUE(torch::equal(first.m2, again.m2));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const FusedBatchNorm one = fused_batch_norm_train(x, weight, bias, 1e-5, epilogue);
  at::set_num_threads(threads);
  EXPECT_LT(relative_diff(one.output, first.output), 1e-6);
  EXPECT_LT(relative_diff(one.m2, first.m2), 1e-9);
}

TEST(FusedBatchNorm, SupportsRowLayoutsOfCpuFloat32AndBfloat16Only) {
  const torch::Tensor weight = torch::ones({4});
  const torch::Tensor bias = torch::zeros({4});
  const torch::Tensor rows =
      torch::randn({2, 4, 3, 3}).contiguous(torch::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(fused_batch_norm_supported(rows, weight, bias, {}));
  EXPECT_TRUE(fused_batch_norm_supported(torch::randn({5, 4}), weight, bias, {}));
  EXPECT_FALSE(fused_batch_norm_supported(torch::randn({2, 4, 3, 3}), weight, bias, {})) << "NCHW";
  const torch::Tensor rows16 = rows.to(torch::kBFloat16);
  EXPECT_TRUE(fused_batch_norm_supported(rows16, weight, bias, {rows16, true}));
  EXPECT_FALSE(fused_batch_norm_supported(rows16, weight, bias, {rows, true}))
      << "a residual of another dtype";
  EXPECT_FALSE(fused_batch_norm_supported(rows16, weight.to(torch::kBFloat16), bias, {}))
      << "bfloat16 parameters";
  EXPECT_FALSE(fused_batch_norm_supported(rows.to(torch::kFloat64), weight, bias, {}));
  EXPECT_FALSE(fused_batch_norm_supported(rows.to(torch::kHalf), weight, bias, {}));
  EXPECT_FALSE(fused_batch_norm_supported(torch::randn({1, 4}), weight, bias, {}))
      << "one value per channel";
  EXPECT_FALSE(fused_batch_norm_supported(torch::randn({5, 4, 2}), weight, bias, {}));
  EXPECT_FALSE(fused_batch_norm_supported(rows, torch::ones({4}, torch::kFloat64), bias, {}));
  EXPECT_FALSE(fused_batch_norm_supported(rows, weight, torch::zeros({3}), {}));
  EXPECT_FALSE(fused_batch_norm_supported(rows, weight, bias, {torch::randn({2, 4, 3, 3}), true}))
      << "a residual in another layout";
  EXPECT_THROW(fused_batch_norm_train(torch::randn({2, 4, 3, 3}), weight, bias, 1e-5, {}),
               std::logic_error);
  EXPECT_TRUE(fused_batch_norm_covers(Precision::kFp32, c10::kCPU));
  EXPECT_TRUE(fused_batch_norm_covers(Precision::kBf16, c10::kCPU));
  EXPECT_FALSE(fused_batch_norm_covers(Precision::kFp16, c10::kCPU));
  EXPECT_FALSE(fused_batch_norm_covers(Precision::kFp32, c10::kCUDA));
}

TEST(FusedBatchNorm, BackwardWithCreateGraphThrows) {
  const torch::Tensor x = torch::randn({6, 3}).requires_grad_();
  const torch::Tensor y =
      fused_batch_norm_train(x, torch::ones({3}), torch::zeros({3}), 1e-5, {}).output;
  try {
    torch::autograd::grad({y.square().sum()}, {x}, {}, /*retain_graph=*/true,
                          /*create_graph=*/true);
    FAIL() << "no error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("no second derivative"), std::string::npos)
        << error.what();
  }
}

/// A BatchNorm with the given weight and bias, in `mode`, fused or not.
BatchNorm make_norm_with(const torch::Tensor& weight, const torch::Tensor& bias,
                         RunningStatsMode mode, bool fused) {
  BatchNorm norm(BatchNormOptions(weight.size(0)).running_stats(mode).fused(fused));
  torch::NoGradGuard no_grad;
  norm->weight.copy_(weight);
  norm->bias.copy_(bias);
  return norm;
}

/// Activations of one dtype, whether a ReLU follows, and how far apart the fused and unfused
/// BatchNorm may end.
struct LayerCase {
  torch::ScalarType dtype;
  bool relu;
  double output, grad_input, parameter_grad;
};

TEST(BatchNormForwardWith, MatchesTheUnfusedLayerOverWindowsInEveryStatisticsMode) {
  // bfloat16: LibTorch rounds after the norm and again after the add, the fused kernel once (so
  // up to two roundings of 2^-8 apart). LibTorch's bfloat16 backward also rounds the weight and
  // bias gradients to bfloat16 (the fused ones are float32: InBfloat16RoundsOnlyItsResultsOnce).
  // It runs without the ReLU, whose mask of a value near zero LibTorch's extra rounding can flip
  // (that test checks the fused ReLU against float64).
  for (const LayerCase layer : {LayerCase{torch::kFloat, true, 2e-6, 2e-5, 2e-5},
                                LayerCase{torch::kBFloat16, false, 8e-3, 1.6e-2, 4e-3}}) {
    for (const RunningStatsMode mode : {RunningStatsMode::kPerCall, RunningStatsMode::kPerWindow}) {
      SCOPED_TRACE(std::string(c10::toString(layer.dtype)) + " " + to_string(mode));
      torch::manual_seed(7);
      const torch::Tensor weight = torch::rand({16}) + 0.5;
      const torch::Tensor bias = torch::randn({16});
      BatchNorm fused = make_norm_with(weight, bias, mode, true);
      BatchNorm separate = make_norm_with(weight, bias, mode, false);
      for (int window = 0; window < 3; ++window) {
        for (int micro = 0; micro < 4; ++micro) {
          SCOPED_TRACE("window " + std::to_string(window) + " micro-batch " +
                       std::to_string(micro));
          const torch::Tensor x =
              rows_tensor(3, 16, 6, 0.5 * window).to(layer.dtype).requires_grad_();
          const torch::Tensor x_separate = x.detach().clone().requires_grad_();
          const torch::Tensor residual = rows_tensor(3, 16, 6, 0.0).to(layer.dtype);
          const torch::Tensor upstream = torch::randn(x.sizes()).to(layer.dtype);
          const torch::Tensor y = fused->forward_with(x, {residual, layer.relu});
          const torch::Tensor y_separate =
              separate->forward_with(x_separate, {residual, layer.relu});
          EXPECT_EQ(y.scalar_type(), layer.dtype);
          EXPECT_LT(relative_diff(y, y_separate), layer.output);
          (y * upstream).sum().backward();
          (y_separate * upstream).sum().backward();
          EXPECT_LT(relative_diff(x.grad(), x_separate.grad()), layer.grad_input);
          EXPECT_EQ(fused->window_count(), separate->window_count());
        }
        fused->commit_window();
        separate->commit_window();
        EXPECT_LT(relative_diff(fused->running_mean, separate->running_mean), 1e-6);
        EXPECT_LT(relative_diff(fused->running_var, separate->running_var), 1e-6);
        EXPECT_TRUE(torch::equal(fused->num_batches_tracked, separate->num_batches_tracked));
      }
      EXPECT_LT(relative_diff(fused->weight.grad(), separate->weight.grad()), layer.parameter_grad);
      EXPECT_LT(relative_diff(fused->bias.grad(), separate->bias.grad()), layer.parameter_grad);
      EXPECT_EQ(fused->num_batches_tracked.item<int64_t>(),
                mode == RunningStatsMode::kPerCall ? 12 : 3);
    }
  }
}

TEST(BatchNormForwardWith, RunsTheSeparateOperationsWhereItCannotFuse) {
  torch::manual_seed(8);
  BatchNorm norm(4);
  const torch::Tensor nchw = torch::randn({3, 4, 5, 5});
  const torch::Tensor residual = torch::randn({3, 4, 5, 5});
  BatchNorm twin(4);
  EXPECT_TRUE(torch::equal(norm->forward_with(nchw, {residual, true}),
                           torch::relu(twin->forward(nchw) + residual)));
  norm->eval();
  twin->eval();
  const torch::Tensor rows = nchw.contiguous(torch::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(torch::equal(norm->forward_with(rows, {{}, true}), torch::relu(twin->forward(rows))));
  EXPECT_TRUE(torch::equal(norm->running_mean, twin->running_mean));
}

TEST(BatchNormForwardWith, KeepsTheLayersChecks) {
  BatchNorm norm(3);
  expect_contains(input_error_of([&] {
                    norm->forward_with(torch::randn({2, 4}), {{}, true});
                  }),
                  {"3 channels", "[2, 4]"});
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);
}

TEST(BatchNormForwardWith, InAConcurrentForwardDefersTheRunningUpdateToItsWrite) {
  torch::manual_seed(4);
  BatchNorm norm(16);
  BatchNorm twin(16);
  const torch::Tensor x = rows_tensor(2, 16, 5, 1.0);
  const torch::Tensor expected = twin->forward_with(x, {{}, true});  // writes at once
  std::vector<StateWrite> writes;
  {
    ConcurrentForwardScope concurrent;
    EXPECT_TRUE(torch::equal(norm->forward_with(x, {{}, true}), expected));
    writes = concurrent.take_state_writes();
  }
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_TRUE(torch::equal(norm->running_mean, torch::zeros({16})));
  ASSERT_EQ(writes.size(), 1u);
  writes[0]();
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_TRUE(torch::equal(norm->running_mean, twin->running_mean));
  EXPECT_TRUE(torch::equal(norm->running_var, twin->running_var));
}

TEST(BatchNormForwardWith, CheckpointRecomputeLeavesRunningStatisticsAlone) {
  torch::manual_seed(9);
  BatchNorm plain(BatchNormOptions(16).running_stats(RunningStatsMode::kPerWindow));
  BatchNorm checkpointed(BatchNormOptions(16).running_stats(RunningStatsMode::kPerWindow));
  const torch::Tensor x = rows_tensor(2, 16, 5, 1.0);
  const auto block_of = [](BatchNorm& norm) -> Block {
    return [norm = norm.ptr()](const torch::Tensor& in) {
      return norm->forward_with(in * 2.0, {in, true});  // (B, 16, 5, 6)
    };
  };
  const torch::Tensor input_plain = x.clone().requires_grad_();
  const torch::Tensor input_checkpointed = x.clone().requires_grad_();
  block_of(plain)(input_plain).sum().backward();
  checkpoint(block_of(checkpointed), input_checkpointed, checkpointed->parameters())
      .sum()
      .backward();
  EXPECT_TRUE(torch::equal(input_plain.grad(), input_checkpointed.grad()));
  EXPECT_TRUE(torch::equal(plain->weight.grad(), checkpointed->weight.grad()));
  EXPECT_EQ(plain->window_count(), checkpointed->window_count());
  EXPECT_EQ(checkpointed->window_count(), 60);
}

}  // namespace
}  // namespace bigbatch::nn
