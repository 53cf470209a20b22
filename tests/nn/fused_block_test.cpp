// The fused pre-LN block: the composite block's outputs and gradients under causal and padding
// masks, in float64, float32 and bf16 autocast; frozen parameters; one autograd node per block;
// a GPT trained over several accumulation windows either way; the choice of kernel.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "bigbatch/models/gpt.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/weight_copies.h"
#include "nn/graph_size.h"
#include "nn/scoped_setting.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

using models::PreLnBlock;
using testing::relative_difference;

/// The block kernel for one test.
struct ScopedBlockKernel : testing::ScopedSetting<BlockKernel> {
  explicit ScopedBlockKernel(BlockKernel kernel)
      : ScopedSetting(block_kernel, set_block_kernel, kernel) {}
};

/// The bf16 product kernels for one test.
struct ScopedBf16Matmul : testing::ScopedSetting<Bf16Matmul> {
  explicit ScopedBf16Matmul(Bf16Matmul mode) : ScopedSetting(bf16_matmul, set_bf16_matmul, mode) {}
};

constexpr int64_t kBatch = 3, kTime = 7, kEmbed = 16, kHeads = 4;

/// The input's and the block's sizes.
struct Sizes {
  int64_t batch = kBatch, time = kTime, embed = kEmbed, heads = kHeads;
};

/// A block whose parameters are all random (LayerNorm's ones and zeros would hide mistakes in
/// their gradients), in `dtype`.
PreLnBlock random_block(torch::ScalarType dtype, const Sizes& sizes = {}) {
  torch::manual_seed(5);
  PreLnBlock block(models::BlockOptions().embed(sizes.embed).heads(sizes.heads));
  torch::NoGradGuard no_grad;
  for (auto& parameter : block->parameters())
    parameter.copy_(torch::randn(parameter.sizes()) * 0.3);
  block->to(dtype);
  return block;
}

/// (B, S) bool: the last three keys of the second sequence and the last one of the third are
/// padding.
torch::Tensor example_padding() {
  torch::Tensor padding = torch::zeros({kBatch, kTime}, torch::kBool);
  padding.index_put_({1, torch::indexing::Slice(kTime - 3)}, true);
  padding.index_put_({2, kTime - 1}, true);
  return padding;
}

/// The output of one block and the gradients of its input and of every parameter, after
/// backward of a random projection of the output.
struct BlockResult {
  torch::Tensor output, dx;
  std::vector<torch::Tensor> parameter_grads;
  int64_t graph_nodes = 0;
};

BlockResult run_block(BlockKernel kernel, torch::ScalarType dtype, const AttentionMask& mask,
                      bool bf16_autocast = false, const Sizes& sizes = {}) {
  const ScopedBlockKernel choice(kernel);
  PreLnBlock block = random_block(dtype, sizes);
  torch::manual_seed(6);
  const torch::Tensor x =
      torch::randn({sizes.batch, sizes.time, sizes.embed}, torch::dtype(dtype)).requires_grad_();
  const torch::Tensor weights =
      torch::randn({sizes.batch, sizes.time, sizes.embed}, torch::dtype(dtype));
  torch::Tensor output;
  {
    const AutocastGuard autocast(bf16_autocast ? Precision::kBf16 : Precision::kFp32, torch::kCPU);
    output = block->forward(x, mask);  // (B, T, C)
  }
  BlockResult result;
  result.graph_nodes = testing::graph_size(output);
  (output * weights).sum().backward();
  result.output = output.detach();
  result.dx = x.grad();
  for (const auto& parameter : block->parameters())
    result.parameter_grads.push_back(parameter.grad());
  return result;
}

void expect_close(const BlockResult& fused, const BlockResult& composite, double tolerance) {
  EXPECT_LT(relative_difference(fused.output, composite.output), tolerance);
  EXPECT_LT(relative_difference(fused.dx, composite.dx), tolerance);
  ASSERT_EQ(fused.parameter_grads.size(), composite.parameter_grads.size());
  for (size_t i = 0; i < fused.parameter_grads.size(); ++i) {
    ASSERT_TRUE(fused.parameter_grads[i].defined()) << "parameter " << i;
    EXPECT_EQ(fused.parameter_grads[i].scalar_type(), composite.parameter_grads[i].scalar_type());
    EXPECT_LT(relative_difference(fused.parameter_grads[i], composite.parameter_grads[i]),
              tolerance)
        << "parameter " << i;
  }
}

TEST(FusedBlock, EqualsCompositeUnderACausalMaskInFloat64) {
  const AttentionMask causal{/*causal=*/true, {}};
  const BlockResult fused = run_block(BlockKernel::kFused, torch::kFloat64, causal);
  const BlockResult composite = run_block(BlockKernel::kComposite, torch::kFloat64, causal);
  expect_close(fused, composite, 1e-12);
}

TEST(FusedBlock, EqualsCompositeUnderPaddingAndBothMasks) {
  for (const bool causal : {false, true}) {
    const AttentionMask mask{causal, example_padding()};
    const BlockResult fused = run_block(BlockKernel::kFused, torch::kFloat64, mask);
    const BlockResult composite = run_block(BlockKernel::kComposite, torch::kFloat64, mask);
    SCOPED_TRACE(causal ? "causal and padding" : "padding");
    expect_close(fused, composite, 1e-12);
  }
}

TEST(FusedBlock, EqualsCompositeWithoutMaskInFloat32) {
  const AttentionMask none{};
  const BlockResult fused = run_block(BlockKernel::kFused, torch::kFloat32, none);
  const BlockResult composite = run_block(BlockKernel::kComposite, torch::kFloat32, none);
  expect_close(fused, composite, 1e-5);
}

TEST(FusedBlock, IsOneAutogradNodePerBlock) {
  const AttentionMask causal{/*causal=*/true, {}};
  const BlockResult fused = run_block(BlockKernel::kFused, torch::kFloat32, causal);
  const BlockResult composite = run_block(BlockKernel::kComposite, torch::kFloat32, causal);
  // The block's node and the 13 leaves' AccumulateGrad nodes (x and 12 parameters).
  EXPECT_EQ(fused.graph_nodes, 1 + 13);
  EXPECT_GT(composite.graph_nodes, 2 * fused.graph_nodes);
}

TEST(FusedBlock, RoundsLikeAutocastUnderBf16) {
  const ScopedBf16Matmul native(Bf16Matmul::kNative);
  const AttentionMask masks[] = {{/*causal=*/true, {}},
                                 {/*causal=*/false, example_padding()},
                                 {/*causal=*/true, example_padding()}};
  for (const AttentionMask& mask : masks) {
    SCOPED_TRACE(mask.padding.defined() ? (mask.causal ? "causal and padding" : "padding")
                                        : "causal");
    const BlockResult fused = run_block(BlockKernel::kFused, torch::kFloat32, mask, true);
    const BlockResult composite = run_block(BlockKernel::kComposite, torch::kFloat32, mask, true);
    ASSERT_EQ(fused.graph_nodes, 1 + 13);  // the fused block did run under autocast
    EXPECT_EQ(fused.output.scalar_type(), torch::kFloat32);  // the residual stream stays fp32
    // bf16 keeps 8 bits: both sides round the products' operands and results the same way; the
    // fused block's attention (nn/bf16_attention.h, where the CPU has avx512_bf16) keeps scores
    // and their gradients in float32, which autocast's composite rounds to bf16.
    expect_close(fused, composite, 1e-2);
    // Both are bf16 arithmetic, many times further from float32's than float32 rounding, and the
    // fused block is no further from it than autocast's composite.
    const BlockResult fp32 = run_block(BlockKernel::kComposite, torch::kFloat32, mask);
    const double fused_error = relative_difference(fused.dx, fp32.dx);
    EXPECT_GT(fused_error, 1e-3);
    EXPECT_LT(fused_error, 1.25 * relative_difference(composite.dx, fp32.dx));
    EXPECT_LT(relative_difference(fused.output, fp32.output),
              1.25 * relative_difference(composite.output, fp32.output));
  }
}

TEST(FusedBlock, LargeWeightGradientsRoundLikeAutocastUnderBf16) {
  // 1,024 rows of width 256: the weight-gradient products of qkv, fc and the output projection
  // are large enough to run from transposed operands on a CPU with AMX (a copy of grad^T for the
  // output projection; for qkv and fc input^T, which the LayerNorms write in passing, and the
  // result transposed back); proj's is not.
  const ScopedBf16Matmul native(Bf16Matmul::kNative);
  const Sizes sizes{/*batch=*/8, /*time=*/128, /*embed=*/256, /*heads=*/4};
  const AttentionMask causal{/*causal=*/true, {}};
  const BlockResult fused = run_block(BlockKernel::kFused, torch::kFloat32, causal, true, sizes);
  const BlockResult composite =
      run_block(BlockKernel::kComposite, torch::kFloat32, causal, true, sizes);
  ASSERT_EQ(fused.graph_nodes, 1 + 13);
  expect_close(fused, composite, 1e-2);
  // Within a few bf16 roundings of float32's weight gradients, as autocast's are.
  const BlockResult fp32 =
      run_block(BlockKernel::kComposite, torch::kFloat32, causal, false, sizes);
  for (size_t i = 0; i < fused.parameter_grads.size(); ++i)
    EXPECT_LT(
        relative_difference(fused.parameter_grads[i], fp32.parameter_grads[i]),
        1.25 * relative_difference(composite.parameter_grads[i], fp32.parameter_grads[i]) + 1e-6)
        << "parameter " << i;
}

TEST(FusedBlock, FrozenParametersGetNoGradient) {
  const ScopedBlockKernel choice(BlockKernel::kFused);
  PreLnBlock block = random_block(torch::kFloat64);
  PreLnBlock reference = random_block(torch::kFloat64);
  for (auto* model : {&block, &reference}) {
    (*model)->attn->qkv->weight.requires_grad_(false);
    (*model)->ln2->bias.requires_grad_(false);
  }
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({kBatch, kTime, kEmbed}, torch::kFloat64);
  const AttentionMask causal{/*causal=*/true, {}};
  block->forward(x, causal).pow(2).sum().backward();
  {
    const ScopedBlockKernel composite(BlockKernel::kComposite);
    reference->forward(x, causal).pow(2).sum().backward();
  }
  EXPECT_FALSE(block->attn->qkv->weight.grad().defined());
  EXPECT_FALSE(block->ln2->bias.grad().defined());
  const auto parameters = block->parameters(), expected = reference->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].requires_grad()) {
      EXPECT_LT(relative_difference(parameters[i].grad(), expected[i].grad()), 1e-12) << i;
    }
  }
}

TEST(FusedBlock, RefusesASecondDerivativeASecondBackwardAndAChangedInput) {
  const ScopedBlockKernel choice(BlockKernel::kFused);
  PreLnBlock block = random_block(torch::kFloat64);
  const torch::Tensor x = torch::randn({kBatch, kTime, kEmbed}, torch::kFloat64).requires_grad_();
  const AttentionMask causal{/*causal=*/true, {}};
  const torch::Tensor loss = block->forward(x, causal).pow(2).sum();
  using testing::logic_error_of;
  const std::string second_derivative = logic_error_of([&] {
    torch::autograd::grad({loss}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  });
  EXPECT_NE(second_derivative.find("no second derivative"), std::string::npos) << second_derivative;
  const torch::Tensor other = block->forward(x, causal).sum();
  other.backward({}, /*retain_graph=*/true);
  const std::string twice = logic_error_of([&] { other.backward(); });
  EXPECT_NE(twice.find("backward ran twice"), std::string::npos) << twice;
  {
    torch::NoGradGuard no_grad;
    block->mlp->fc->weight.add_(1.0);  // as an optimizer step inside the window would
  }
  const std::string changed = logic_error_of([&] { loss.backward(); });
  EXPECT_NE(changed.find("changed in place"), std::string::npos) << changed;
}

/// Next-token loss of a GPT summed over a micro-batch (B, T), as the trainer's objective sums.
torch::Tensor summed_loss(models::Gpt& model, const torch::Tensor& tokens) {
  const int64_t time = tokens.size(1);
  const torch::Tensor logits = model->forward(tokens.narrow(1, 0, time - 1));  // (B, T-1, V)
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), tokens.narrow(1, 1, time - 1).reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

/// The weights of a GPT after `steps` AdamW steps, each a window of 8 sequences run as micro-
/// batches of 3, 3 and 2 with the loss divided by the window's tokens, clipped at norm 1. In
/// float64, where AdamW's normalised steps do not blow the last bits of float32 up.
/// Where a test keeps the fused blocks' weight copies (nn/weight_copies.h).
enum class KeptCopies { kNone, kPerWindow, kAcrossWindows };

/// How train_gpt trains.
struct TrainSettings {
  bool bf16 = false;  ///< float32 under bf16 autocast, or float64
  KeptCopies copies = KeptCopies::kNone;
  bool direct_grads = false;   ///< backward inside a DirectWeightGradScope
  bool checkpointing = false;  ///< every block recomputed in backward
};

/// The weights of a small GPT after `steps` windows of three micro-batches and AdamW steps.
std::vector<torch::Tensor> train_gpt(BlockKernel kernel, int64_t steps,
                                     const TrainSettings& settings = {}) {
  const ScopedBlockKernel choice(kernel);
  const ScopedBf16Matmul native(Bf16Matmul::kNative);
  torch::manual_seed(3);
  models::Gpt model(models::GptOptions().vocab(32).context(12).layers(2).heads(2).embed(16));
  const bool bf16 = settings.bf16;
  model->to(bf16 ? torch::kFloat32 : torch::kFloat64);
  if (settings.checkpointing)
    model->set_checkpointing(parse_checkpoint_policy("every:1", "checkpointing"));
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  std::optional<WeightCopyScope> across;
  if (settings.copies == KeptCopies::kAcrossWindows)
    across.emplace();  // spans the optimizer's in-place steps, which bump the weights' versions
  for (int64_t step = 0; step < steps; ++step) {
    const torch::Tensor window = torch::randint(32, {8, 12}, torch::kLong);
    const double tokens = 8.0 * 11.0;
    optimizer.zero_grad();
    std::optional<WeightCopyScope> per_window;
    if (settings.copies == KeptCopies::kPerWindow)
      per_window.emplace();  // as the engine's Trainer keeps them
    for (const auto& micro_batch : window.split_with_sizes({3, 3, 2})) {
      torch::Tensor loss;
      {
        const AutocastGuard autocast(bf16 ? Precision::kBf16 : Precision::kFp32, torch::kCPU);
        loss = summed_loss(model, micro_batch) / tokens;
      }
      std::optional<DirectWeightGradScope> direct;
      if (settings.direct_grads)
        direct.emplace();  // as the engine's GradientAccumulator::backward opens it
      loss.backward();
    }
    per_window.reset();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
  }
  std::vector<torch::Tensor> weights;
  for (const auto& parameter : model->parameters())
    weights.push_back(parameter.detach().clone());
  return weights;
}

TEST(FusedBlock, TrainsAGptAsTheCompositeBlockDoesOverManyWindows) {
  const std::vector<torch::Tensor> fused = train_gpt(BlockKernel::kFused, 12);
  const std::vector<torch::Tensor> composite = train_gpt(BlockKernel::kComposite, 12);
  ASSERT_EQ(fused.size(), composite.size());
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_LT(relative_difference(fused[i], composite[i]), 1e-10) << "parameter " << i;
}

TEST(FusedBlock, TrainsTheSameWithItsBf16WeightCopiesKeptPerWindowOrAcrossWindows) {
  const std::vector<torch::Tensor> fresh = train_gpt(BlockKernel::kFused, 6, {true});
  for (const KeptCopies copies : {KeptCopies::kPerWindow, KeptCopies::kAcrossWindows}) {
    const std::vector<torch::Tensor> kept = train_gpt(BlockKernel::kFused, 6, {true, copies});
    ASSERT_EQ(kept.size(), fresh.size());
    for (size_t i = 0; i < kept.size(); ++i)
      EXPECT_TRUE(torch::equal(kept[i], fresh[i])) << "parameter " << i;
  }
}

TEST(FusedBlock, TrainsTheSameWithItsBf16WeightGradientsAddedToGradDirectly) {
  for (const bool checkpointing : {false, true}) {
    const std::vector<torch::Tensor> returned =
        train_gpt(BlockKernel::kFused, 6, {true, KeptCopies::kNone, false, checkpointing});
    const int64_t before = direct_weight_grads_added();
    const std::vector<torch::Tensor> direct =
        train_gpt(BlockKernel::kFused, 6, {true, KeptCopies::kPerWindow, true, checkpointing});
    // (2 blocks x 4 weights + the head's) x 3 micro-batches x 6 windows, each added to .grad by
    // its block or the head's Linear (nn/bf16_linear; under checkpointing, from inside the
    // recomputation's torch::autograd::grad, which then hands the outer backward no gradient for
    // it).
    EXPECT_EQ(direct_weight_grads_added() - before, (2 * 4 + 1) * 3 * 6) << checkpointing;
    ASSERT_EQ(direct.size(), returned.size());
    for (size_t i = 0; i < direct.size(); ++i)
      EXPECT_TRUE(torch::equal(direct[i], returned[i]))
          << "parameter " << i << ", " << checkpointing;
  }
}

TEST(FusedBlock, AutoRunsWhereItApplies) {
  const torch::Tensor x = torch::zeros({2, 64, 16});
  {
    const ScopedBlockKernel choice(BlockKernel::kAuto);
    EXPECT_TRUE(use_fused_block(x, /*dropout=*/0.0, /*training=*/true, /*keys=*/64));
    EXPECT_TRUE(use_fused_block(x, /*dropout=*/0.1, /*training=*/false, /*keys=*/64));
    EXPECT_FALSE(use_fused_block(x, /*dropout=*/0.1, /*training=*/true, /*keys=*/64));
    EXPECT_FALSE(use_fused_block(x.to(torch::kFloat16), 0.0, true, 64));
    if (fused_attention_available()) {  // LibTorch's attention is the faster at many keys
      EXPECT_FALSE(use_fused_block(x, 0.0, true, kFusedCpuMinKeys));
    }
    {
      const ScopedBf16Matmul fp32_kernels(Bf16Matmul::kFp32);
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      EXPECT_FALSE(use_fused_block(x, 0.0, true, 64));
    }
    {
      const ScopedBf16Matmul native(Bf16Matmul::kNative);
      const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      EXPECT_TRUE(use_fused_block(x, 0.0, true, 64));
    }
  }
  const ScopedBlockKernel composite(BlockKernel::kComposite);
  EXPECT_FALSE(use_fused_block(x, 0.0, true, 64));
  const ScopedBlockKernel fused(BlockKernel::kFused);
  EXPECT_TRUE(use_fused_block(x, 0.0, true, kFusedCpuMinKeys));
}

TEST(FusedBlock, ParsesItsSettingAndNamesTheFieldOfABadOne) {
  EXPECT_EQ(parse_block_kernel("auto", "f"), BlockKernel::kAuto);
  EXPECT_EQ(parse_block_kernel("fused", "f"), BlockKernel::kFused);
  EXPECT_EQ(parse_block_kernel("composite", "f"), BlockKernel::kComposite);
  for (const BlockKernel kernel :
       {BlockKernel::kAuto, BlockKernel::kFused, BlockKernel::kComposite})
    EXPECT_EQ(parse_block_kernel(to_string(kernel), "f"), kernel);
  const std::string message =
      testing::input_error_of([] { parse_block_kernel("fast", "model.block_kernel"); });
  EXPECT_NE(message.find("model.block_kernel"), std::string::npos) << message;
  EXPECT_NE(message.find("\"fast\""), std::string::npos) << message;
}

}  // namespace
}  // namespace bigbatch::nn
