#include "bigbatch/nn/norm.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bigbatch/models/model_info.h"
#include "bigbatch/nn/concurrent_forward.h"
#include "bigbatch/nn/recompute.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

using bigbatch::testing::expect_contains;
using bigbatch::testing::input_error_of;

/// max |a - b| over all elements, in float64.
double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

TEST(NormKind, ParsesAndPrintsEveryKind) {
  for (const std::string text : {"batch", "group", "layer", "instance"})
    EXPECT_EQ(to_string(parse_norm_kind(text, "model.norm")), text);
  expect_contains(input_error_of([] { parse_norm_kind("bn", "model.norm"); }),
                  {"model.norm", "\"bn\"", "batch|group|layer|instance"});
}

TEST(RunningStatsMode, ParsesAndPrintsEveryMode) {
  EXPECT_EQ(parse_running_stats_mode("per_call", "f"), RunningStatsMode::kPerCall);
  EXPECT_EQ(parse_running_stats_mode("per_window", "f"), RunningStatsMode::kPerWindow);
  EXPECT_EQ(to_string(RunningStatsMode::kPerWindow), "per_window");
  expect_contains(input_error_of([] { parse_running_stats_mode("window", "model.bn_stats"); }),
                  {"model.bn_stats", "\"window\"", "per_call|per_window"});
}

TEST(BatchNorm, HasPyTorchsParametersAndBuffers) {
  BatchNorm norm(5);
  std::vector<std::string> parameters;
  for (const auto& item : norm->named_parameters())
    parameters.push_back(item.key());
  EXPECT_EQ(parameters, (std::vector<std::string>{"weight", "bias"}));
  std::vector<std::string> buffers;
  for (const auto& item : norm->named_buffers())
    buffers.push_back(item.key());
  EXPECT_EQ(buffers,
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_TRUE(torch::equal(norm->weight, torch::ones({5})));
  EXPECT_TRUE(torch::equal(norm->bias, torch::zeros({5})));
  EXPECT_TRUE(torch::equal(norm->running_var, torch::ones({5})));
  EXPECT_EQ(norm->num_batches_tracked.scalar_type(), torch::kLong);
  EXPECT_EQ(norm->num_batches_tracked.dim(), 0);
  EXPECT_EQ(norm->options().eps(), 1e-5);
  EXPECT_EQ(norm->options().momentum(), 0.1);
  EXPECT_EQ(norm->running_stats_mode(), RunningStatsMode::kPerCall);
}

/// Runs `steps` training forwards + backwards through ours and LibTorch's layer (same affine
/// values) and expects bit-identical outputs, gradients and running statistics, then compares
/// one eval forward.
template <typename Reference>
void expect_same_as_libtorch(Reference reference, const std::vector<int64_t>& shape) {
  const int64_t channels = shape[1];
  BatchNorm ours(channels);
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor weight = torch::rand({channels}) + 0.5;
    const torch::Tensor bias = torch::randn({channels});
    ours->weight.copy_(weight);
    ours->bias.copy_(bias);
    reference->weight.copy_(weight);
    reference->bias.copy_(bias);
  }
  torch::Tensor x;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    x = (torch::randn(shape) * 2.0 + 1.5).requires_grad_();
    const torch::Tensor upstream = torch::randn(shape);
    const torch::Tensor x_ref = x.detach().clone().requires_grad_();
    const torch::Tensor y = ours->forward(x);
    const torch::Tensor y_ref = reference->forward(x_ref);
    (y * upstream).sum().backward();
    (y_ref * upstream).sum().backward();
    EXPECT_TRUE(torch::equal(y, y_ref));
    EXPECT_TRUE(torch::equal(x.grad(), x_ref.grad()));
    EXPECT_TRUE(torch::equal(ours->weight.grad(), reference->weight.grad()));
    EXPECT_TRUE(torch::equal(ours->bias.grad(), reference->bias.grad()));
    EXPECT_TRUE(torch::equal(ours->running_mean, reference->running_mean));
    EXPECT_TRUE(torch::equal(ours->running_var, reference->running_var));
    EXPECT_TRUE(torch::equal(ours->num_batches_tracked, reference->num_batches_tracked));
  }
  ours->eval();
  reference->eval();
  EXPECT_TRUE(torch::equal(ours->forward(x.detach()), reference->forward(x.detach())));
  EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 3);
}

TEST(BatchNorm, MatchesLibTorchBatchNorm2dBitwise) {
  torch::manual_seed(0);
  expect_same_as_libtorch(torch::nn::BatchNorm2d(4), {6, 4, 5, 3});
}

TEST(BatchNorm, MatchesLibTorchBatchNorm1dBitwise) {
  torch::manual_seed(1);
  expect_same_as_libtorch(torch::nn::BatchNorm1d(7), {9, 7});
}

/// Deterministic input mirrored by the Python golden script below:
/// f(0.37 * i) * (1 + c) * scale + 0.5 * c over the flat index i, computed in float64.
torch::Tensor golden_input(const std::vector<int64_t>& shape, bool use_cos, double scale) {
  int64_t n = 1;
  for (const int64_t size : shape)
    n *= size;
  const torch::Tensor i = torch::arange(n, torch::kFloat64);
  const torch::Tensor wave = (use_cos ? torch::cos(0.37 * i) : torch::sin(0.37 * i)).view(shape);
  const torch::Tensor c = torch::arange(shape[1], torch::kFloat64).view({1, -1, 1, 1});
  return (wave * (1 + c) * scale + 0.5 * c).to(torch::kFloat32);
}

TEST(BatchNorm, MatchesPythonTorchBatchNorm2d) {
  // Values printed by Python PyTorch 1.13:
  //   bn = torch.nn.BatchNorm2d(3); weight [0.5, 1, 1.5], bias [0.1, -0.2, 0.3]
  //   y1 = bn(x1); (y1 * g).sum().backward(); bn(x2); bn.eval(); bn(x1)
  // with x1 = golden_input(sin, 1), x2 = golden_input(cos, 2), g = cos(0.23 * i), shape
  // (4, 3, 2, 2).
  const std::vector<int64_t> shape = {4, 3, 2, 2};
  BatchNorm norm(3);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::tensor({0.5, 1.0, 1.5}));
    norm->bias.copy_(torch::tensor({0.1, -0.2, 0.3}));
  }
  const torch::Tensor x1 = golden_input(shape, false, 1.0).requires_grad_();
  const torch::Tensor g = torch::cos(0.23 * torch::arange(48, torch::kFloat64))
                              .view(shape)
                              .to(torch::kFloat32);  // (4, 3, 2, 2)
  const torch::Tensor y1 = norm->forward(x1);
  (y1 * g).sum().backward();
  norm->forward(golden_input(shape, true, 2.0));
  const auto expect_near = [](const torch::Tensor& actual, const std::vector<double>& expected) {
    const torch::Tensor flat = actual.detach().flatten().narrow(0, 0, int64_t(expected.size()));
    EXPECT_LT(max_abs_diff(flat, torch::tensor(expected, torch::kFloat64)), 1e-6)
        << flat << " vs " << torch::tensor(expected, torch::kFloat64);
  };
  expect_near(y1, {0.01611439883708954, 0.2696540355682373, 0.4888783097267151, 0.6441161632537842,
                   1.09220290184021, 1.042323350906372});
  expect_near(x1.grad(), {0.6981273293495178, 0.6074163913726807, 0.4905296564102173,
                          0.35878801345825195, 0.7818126082420349, 0.6292964220046997});
  expect_near(norm->weight.grad(), {3.2513880729675293, -4.584960460662842, 3.6604225635528564});
  expect_near(norm->bias.grad(), {0.6140255928039551, -1.7392418384552002, -2.721360683441162});
  expect_near(norm->running_mean, {0.02854599431157112, 0.06845080107450485, 0.09714023768901825});
  expect_near(norm->running_var, {1.0590273141860962, 1.842109203338623, 3.1239938735961914});
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 2);
  norm->eval();
  expect_near(norm->forward(x1.detach()),
              {0.0861305445432663, 0.2618263065814972, 0.4137424826622009, 0.5213178992271423,
               1.5854606628417969, 1.5344668626785278});
}

/// Running statistics after kPerWindow forwards over `batch` cut into `sizes`, then commit,
/// against one kPerCall forward over the whole batch.
void expect_window_equals_big_batch(const torch::Tensor& batch, const std::vector<int64_t>& sizes) {
  const int64_t channels = batch.size(1);
  BatchNorm whole(channels);
  BatchNorm windowed(BatchNormOptions(channels).running_stats(RunningStatsMode::kPerWindow));
  for (int window = 0; window < 2; ++window) {  // the second window starts from the first's
    SCOPED_TRACE("window " + std::to_string(window));
    const torch::Tensor data = batch * (1.0 + window);
    whole->forward(data);
    const torch::Tensor before = windowed->running_mean.clone();
    int64_t offset = 0;
    for (const int64_t size : sizes) {
      const torch::Tensor micro = data.narrow(0, offset, size);
      offset += size;
      const torch::Tensor y = windowed->forward(micro);
      BatchNorm per_call(channels);  // normalisation is unchanged: batch statistics of `micro`
      EXPECT_TRUE(torch::equal(y, per_call->forward(micro)));
      EXPECT_TRUE(torch::equal(windowed->running_mean, before)) << "updated before commit";
    }
    EXPECT_EQ(windowed->window_count(), batch.numel() / channels);
    EXPECT_EQ(windowed->num_batches_tracked.item<int64_t>(), window);
    windowed->commit_window();
    EXPECT_EQ(windowed->window_count(), 0);
    EXPECT_EQ(windowed->num_batches_tracked.item<int64_t>(), window + 1);
    EXPECT_LT(max_abs_diff(windowed->running_mean, whole->running_mean), 1e-6);
    EXPECT_LT(max_abs_diff(windowed->running_var, whole->running_var), 1e-6);
    // Align exactly so that the next window compares updates, not inherited rounding.
    torch::NoGradGuard no_grad;
    windowed->running_mean.copy_(whole->running_mean);
    windowed->running_var.copy_(whole->running_var);
  }
}

TEST(BatchNorm, PerWindowStatisticsEqualOneForwardOverTheWholeWindow) {
  torch::manual_seed(2);
  // Large mean against the spread, uneven micro-batches, a micro-batch of one image.
  expect_window_equals_big_batch(torch::randn({10, 3, 4, 5}) * 0.5 + 4.0, {3, 5, 1, 1});
  expect_window_equals_big_batch(torch::randn({16, 8, 2, 2}) * 3.0 - 1.0, {8, 8});
  expect_window_equals_big_batch(torch::randn({13, 6}) * 2.0 + 10.0, {2, 7, 4});
}

TEST(BatchNorm, PerWindowCommitWithoutForwardsAndDiscardChangeNothing) {
  torch::manual_seed(3);
  BatchNorm norm(BatchNormOptions(4).running_stats(RunningStatsMode::kPerWindow));
  norm->commit_window();
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);
  norm->forward(torch::randn({5, 4, 3, 3}) + 2.0);
  EXPECT_EQ(norm->window_count(), 45);
  norm->discard_window();
  EXPECT_EQ(norm->window_count(), 0);
  norm->commit_window();
  EXPECT_TRUE(torch::equal(norm->running_mean, torch::zeros({4})));
  EXPECT_TRUE(torch::equal(norm->running_var, torch::ones({4})));
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);

  norm->eval();  // eval forwards neither accumulate nor update
  norm->forward(torch::randn({5, 4, 3, 3}));
  EXPECT_EQ(norm->window_count(), 0);
  norm->train();
  norm->forward(torch::randn({5, 4, 3, 3}));
  norm->set_running_stats_mode(RunningStatsMode::kPerCall);  // drops the pending window
  EXPECT_EQ(norm->window_count(), 0);
  norm->forward(torch::randn({5, 4, 3, 3}));
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 1);
  norm->commit_window();  // nothing pending in kPerCall
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 1);
}

TEST(BatchNorm, CheckpointRecomputeLeavesRunningStatisticsAlone) {
  for (const RunningStatsMode mode : {RunningStatsMode::kPerCall, RunningStatsMode::kPerWindow}) {
    SCOPED_TRACE(to_string(mode));
    torch::manual_seed(4);
    BatchNorm plain(BatchNormOptions(3).running_stats(mode));
    BatchNorm checkpointed(BatchNormOptions(3).running_stats(mode));
    const torch::Tensor weight = torch::randn({3, 3});  // a layer before the norm
    const torch::Tensor x = torch::randn({6, 3}) + 1.0;
    std::vector<bool> seen_recomputing;
    const auto block_of = [&](BatchNorm& norm) -> Block {
      return [&, norm = norm.ptr()](const torch::Tensor& in) {
        seen_recomputing.push_back(is_recomputing());
        return torch::tanh(norm->forward(torch::matmul(in, weight)));  // (B, 3)
      };
    };
    const std::vector<torch::Tensor> parameters_checkpointed = checkpointed->parameters();
    const torch::Tensor input_plain = x.clone().requires_grad_();
    const torch::Tensor input_checkpointed = x.clone().requires_grad_();
    block_of(plain)(input_plain).sum().backward();
    checkpoint(block_of(checkpointed), input_checkpointed, parameters_checkpointed)
        .sum()
        .backward();
    EXPECT_EQ(seen_recomputing, (std::vector<bool>{false, false, true}));
    EXPECT_FALSE(is_recomputing());
    EXPECT_TRUE(torch::equal(input_plain.grad(), input_checkpointed.grad()));
    EXPECT_TRUE(torch::equal(plain->weight.grad(), checkpointed->weight.grad()));
    EXPECT_EQ(plain->window_count(), checkpointed->window_count());
    plain->commit_window();
    checkpointed->commit_window();
    EXPECT_TRUE(torch::equal(plain->running_mean, checkpointed->running_mean));
    EXPECT_TRUE(torch::equal(plain->running_var, checkpointed->running_var));
    EXPECT_EQ(checkpointed->num_batches_tracked.item<int64_t>(), 1);
  }
}

TEST(BatchNorm, RejectsInvalidOptionsAndInputs) {
  expect_contains(input_error_of([] { BatchNorm(BatchNormOptions(0)); }),
                  {"BatchNormOptions.num_features", "0"});
  expect_contains(input_error_of([] { BatchNorm(BatchNormOptions(3).eps(-1.0)); }),
                  {"BatchNormOptions.eps", "-1"});
  expect_contains(input_error_of([] { BatchNorm(BatchNormOptions(3).momentum(1.5)); }),
                  {"BatchNormOptions.momentum", "1.5"});
  BatchNorm norm(3);
  expect_contains(input_error_of([&] {
                    norm->forward(torch::randn({2, 4, 5, 5}));
                  }),
                  {"3 channels", "BatchNormOptions.num_features", "[2, 4, 5, 5]"});
  expect_contains(input_error_of([&] {
                    norm->forward(torch::randn({2, 3, 5}));
                  }),
                  {"(B, C) or (B, C, H, W)", "[2, 3, 5]"});
  expect_contains(input_error_of([&] {
                    norm->forward(torch::randn({1, 3}));
                  }),
                  {"more than one value per channel", "[1, 3]"});
  norm->eval();
  EXPECT_EQ(norm->forward(torch::randn({1, 3})).sizes(), (std::vector<int64_t>{1, 3}));
}

TEST(BatchNorm, InAConcurrentForwardDefersItsWindowWritesAndRefusesAtensRunningUpdate) {
  BatchNorm norm(3);
  BatchNorm window(BatchNormOptions(3).running_stats(RunningStatsMode::kPerWindow));
  const torch::Tensor running_mean = norm->running_mean.clone();
  const torch::Tensor x = torch::randn({4, 3});
  std::vector<StateWrite> writes;
  {
    ConcurrentForwardScope concurrent;
    EXPECT_TRUE(in_concurrent_forward());
    // ATen's kernel would write the running statistics during the forward itself.
    expect_contains(
        input_error_of([&] { norm->forward(x); }),
        {"BatchNorm in training mode", "fused kernel", "norm_policy = \"ghost\"",
         "Float on cpu of shape [4, 3]", "TrainerOptions.concurrent_micro_batches = 1"});
    EXPECT_TRUE(torch::equal(norm->running_mean, running_mean));
    norm->eval();  // reads the statistics only
    EXPECT_EQ(norm->forward(x).sizes(), (std::vector<int64_t>{4, 3}));
    // Per-window statistics are computed here; merging them waits for the writes to be made.
    window->forward(x);
    EXPECT_EQ(window->window_count(), 0);
    writes = concurrent.take_state_writes();
    EXPECT_TRUE(concurrent.take_state_writes().empty());
  }
  EXPECT_FALSE(in_concurrent_forward());
  ASSERT_EQ(writes.size(), 1u);
  writes[0]();
  EXPECT_EQ(window->window_count(), 4);
  norm->train();
  EXPECT_EQ(norm->forward(x).sizes(), (std::vector<int64_t>{4, 3}));
}

TEST(ConcurrentForwardScope, CollectsDeferredWritesInOrderInTheInnermostScope) {
  EXPECT_THROW(defer_state_write([] {}), std::logic_error);
  std::vector<int> made;
  ConcurrentForwardScope outer;
  defer_state_write([&made] { made.push_back(1); });
  {
    ConcurrentForwardScope inner;
    defer_state_write([&made] { made.push_back(2); });
    defer_state_write([&made] { made.push_back(3); });
    for (StateWrite& write : inner.take_state_writes())
      write();
  }
  EXPECT_EQ(made, (std::vector<int>{2, 3}));
  defer_state_write([&made] { made.push_back(4); });
  for (StateWrite& write : outer.take_state_writes())
    write();
  EXPECT_EQ(made, (std::vector<int>{2, 3, 1, 4}));
}

TEST(BatchNormFunctions, ReachEveryBatchNormOfAModel) {
  torch::nn::Sequential model(torch::nn::Linear(4, 6), BatchNorm(6), torch::nn::ReLU(),
                              torch::nn::Linear(6, 6), BatchNorm(6));
  EXPECT_EQ(batch_norms_of(*model).size(), 2u);
  EXPECT_EQ(count_batch_norms(*model), 2);
  set_running_stats_mode(*model, RunningStatsMode::kPerWindow);
  for (BatchNormImpl* norm : batch_norms_of(*model))
    EXPECT_EQ(norm->running_stats_mode(), RunningStatsMode::kPerWindow);
  torch::manual_seed(5);
  model->forward(torch::randn({8, 4}));
  for (BatchNormImpl* norm : batch_norms_of(*model))
    EXPECT_EQ(norm->window_count(), 8);
  discard_window(*model);
  model->forward(torch::randn({8, 4}));
  commit_window(*model);
  for (BatchNormImpl* norm : batch_norms_of(*model)) {
    EXPECT_EQ(norm->window_count(), 0);
    EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 1);
  }
  BatchNorm alone(3);
  EXPECT_EQ(batch_norms_of(*alone).size(), 1u);
  EXPECT_EQ(count_batch_norms(*alone), 1);
}

TEST(BatchNormFunctions, CountIncludesLibTorchBatchNorms) {
  torch::nn::Sequential model(torch::nn::Conv2d(3, 8, 3), torch::nn::BatchNorm2d(8),
                              torch::nn::ReLU(), torch::nn::Flatten(), torch::nn::BatchNorm1d(8),
                              torch::nn::GroupNorm(2, 8), BatchNorm(8));
  EXPECT_EQ(count_batch_norms(*model), 3);
  EXPECT_EQ(batch_norms_of(*model).size(), 1u);  // only ours know windows
  EXPECT_EQ(count_batch_norms(*torch::nn::BatchNorm3d(2)), 1);
  EXPECT_EQ(count_batch_norms(*torch::nn::Linear(2, 2)), 0);
}

TEST(MakeNorm, EveryKindHasTheSameParameterCountAndShape) {
  EXPECT_EQ(group_norm_groups(1), 1);
  EXPECT_EQ(group_norm_groups(2), 1);
  EXPECT_EQ(group_norm_groups(3), 1);
  EXPECT_EQ(group_norm_groups(16), 8);
  EXPECT_EQ(group_norm_groups(32), 16);
  EXPECT_EQ(group_norm_groups(48), 24);
  EXPECT_EQ(group_norm_groups(64), 32);
  EXPECT_EQ(group_norm_groups(256), 32);
  EXPECT_EQ(group_norm_groups(70), 14);
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({4, 16, 5, 5});
  for (const NormKind kind :
       {NormKind::kBatch, NormKind::kGroup, NormKind::kLayer, NormKind::kInstance}) {
    SCOPED_TRACE(to_string(kind));
    torch::nn::AnyModule norm = make_norm(kind, 16);
    EXPECT_EQ(models::parameter_count(*norm.ptr()), 32);
    EXPECT_EQ(norm.forward(x).sizes(), x.sizes());
    EXPECT_EQ(norm.forward(x.view({4, 400}).narrow(1, 0, 16)).sizes(),
              (std::vector<int64_t>{4, 16}));
    EXPECT_EQ(count_batch_norms(*norm.ptr()), kind == NormKind::kBatch ? 1 : 0);
  }
  const auto groups_of = [](NormKind kind) {
    return make_norm(kind, 16).ptr()->as<torch::nn::GroupNorm>()->options.num_groups();
  };
  EXPECT_EQ(groups_of(NormKind::kGroup), 8);
  EXPECT_EQ(groups_of(NormKind::kLayer), 1);
  EXPECT_EQ(groups_of(NormKind::kInstance), 16);
  expect_contains(input_error_of([] { make_norm(NormKind::kGroup, 0); }), {"channels", "0"});
}

}  // namespace
}  // namespace bigbatch::nn
