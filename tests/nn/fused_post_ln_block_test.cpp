// The fused post-LN block, through Hugging Face BERT's layer: the composite layer's outputs and
// gradients on padded batches and on packed real tokens (with and without fillers), in float64,
// float32 and bf16 autocast, the bf16 weight gradients added to .grad directly; frozen
// parameters; one autograd node per layer; adapters and narrow frozen weights left to the
// composite layer; a BERT classifier trained over several windows.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "bigbatch/models/hf_bert.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/fused_post_ln_block.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/packed_tokens.h"
#include "bigbatch/nn/precision.h"
#include "nn/graph_size.h"
#include "nn/scoped_setting.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

using models::HfBertConfig;
using models::HfBertLayer;
using testing::relative_difference;

struct ScopedBlockKernel : testing::ScopedSetting<BlockKernel> {
  explicit ScopedBlockKernel(BlockKernel kernel)
      : ScopedSetting(block_kernel, set_block_kernel, kernel) {}
};

struct ScopedBf16Matmul : testing::ScopedSetting<Bf16Matmul> {
  explicit ScopedBf16Matmul(Bf16Matmul mode) : ScopedSetting(bf16_matmul, set_bf16_matmul, mode) {}
};

constexpr int64_t kBatch = 3, kTime = 7, kHidden = 16, kHeads = 4;

/// An intermediate width other than 4 x hidden, so that nothing may assume BERT-base's.
HfBertConfig small_config() {
  return HfBertConfig()
      .vocab_size(50)
      .hidden_size(kHidden)
      .num_hidden_layers(2)
      .num_attention_heads(kHeads)
      .intermediate_size(24)
      .max_position_embeddings(16)
      .layer_norm_eps(1e-12)
      .hidden_dropout_prob(0.0)
      .attention_probs_dropout_prob(0.0)
      .classifier_dropout(0.0)
      .num_labels(3);
}

/// A layer whose parameters are all random (LayerNorm's ones and zeros would hide mistakes in
/// their gradients), in `dtype`.
HfBertLayer random_layer(torch::ScalarType dtype) {
  torch::manual_seed(5);
  HfBertLayer layer(small_config());
  torch::NoGradGuard no_grad;
  for (auto& parameter : layer->parameters())
    parameter.copy_(torch::randn(parameter.sizes()) * 0.3);
  layer->to(dtype);
  return layer;
}

/// (B, T), 1 at real tokens: rows of 7, 4 and 6 tokens.
torch::Tensor example_attention_mask() {
  const torch::Tensor lengths = torch::tensor({7, 4, 6}, torch::kLong);
  return torch::arange(kTime).unsqueeze(0).lt(lengths.unsqueeze(1)).to(torch::kLong);
}

/// How a test feeds the layer: a padded batch (B, T, C), the real tokens packed (N, C), or packed
/// with fillers up to a multiple of 8 rows (N + F, C; 17 tokens of 21 positions: 4 fillers).
enum class Rows { kPadded, kPacked, kPackedWithFillers };
constexpr int64_t kRealTokens = 17, kFillers = 4;

/// The output of one layer and the gradients of its input and of every parameter, after
/// backward of a random projection of the output.
struct LayerResult {
  torch::Tensor output, dx;
  std::vector<torch::Tensor> parameter_grads;
  int64_t graph_nodes = 0;
};

LayerResult run_layer(BlockKernel kernel, torch::ScalarType dtype, Rows rows,
                      bool bf16_autocast = false, HfBertLayer layer = nullptr,
                      bool direct_grads = false) {
  const ScopedBlockKernel choice(kernel);
  if (layer.is_empty())
    layer = random_layer(dtype);
  const bool packed = rows != Rows::kPadded;
  const PackedTokens tokens =
      pack_tokens(example_attention_mask(), rows == Rows::kPackedWithFillers ? 8 : 1);
  torch::manual_seed(6);
  const torch::Tensor padded = torch::randn({kBatch, kTime, kHidden}, torch::dtype(dtype));
  const torch::Tensor x = (packed ? tokens.pack(padded) : padded).clone().requires_grad_();
  // The fillers' outputs are read by nothing: weight 0.
  const torch::Tensor weights =
      rows == Rows::kPackedWithFillers
          ? torch::cat({torch::randn({kRealTokens, kHidden}, torch::dtype(dtype)),
                        torch::zeros({tokens.fillers, kHidden}, torch::dtype(dtype))})
          : torch::randn(x.sizes(), torch::dtype(dtype));
  torch::Tensor output;
  {
    const AutocastGuard autocast(bf16_autocast ? Precision::kBf16 : Precision::kFp32, torch::kCPU);
    output = packed ? layer->forward(x, tokens)  // (N + F, C)
                    : layer->forward(x, AttentionMask{false, example_attention_mask().eq(0)});
  }
  LayerResult result;
  result.graph_nodes = testing::graph_size(output);
  {
    std::optional<DirectWeightGradScope> direct;
    if (direct_grads)
      direct.emplace();  // as the engine's GradientAccumulator::backward opens it
    (output * weights).sum().backward();
  }
  result.output = output.detach();
  result.dx = x.grad();
  for (const auto& parameter : layer->parameters())
    result.parameter_grads.push_back(parameter.grad());
  return result;
}

/// The key bias's index in HfBertLayer's parameters (query weight and bias, key weight, key bias,
/// ...). It adds q . b_k to every score of a query alike, which softmax ignores: its gradient is
/// zero but for rounding, so both sides' are rounding noise, compared by size alone.
constexpr size_t kKeyBias = 3;

void expect_close(const LayerResult& fused, const LayerResult& composite, double tolerance) {
  EXPECT_LT(relative_difference(fused.output, composite.output), tolerance);
  EXPECT_LT(relative_difference(fused.dx, composite.dx), tolerance);
  ASSERT_EQ(fused.parameter_grads.size(), composite.parameter_grads.size());
  for (size_t i = 0; i < fused.parameter_grads.size(); ++i) {
    ASSERT_TRUE(fused.parameter_grads[i].defined()) << "parameter " << i;
    EXPECT_EQ(fused.parameter_grads[i].scalar_type(), composite.parameter_grads[i].scalar_type());
    EXPECT_EQ(fused.parameter_grads[i].sizes(), composite.parameter_grads[i].sizes());
    if (i == kKeyBias) {
      const double scale = composite.parameter_grads[0].abs().max().item<double>();
      EXPECT_LT(fused.parameter_grads[i].abs().max().item<double>(), 10 * tolerance * scale);
    } else {
      EXPECT_LT(relative_difference(fused.parameter_grads[i], composite.parameter_grads[i]),
                tolerance)
          << "parameter " << i;
    }
  }
}

/// The layer's one node and 17 AccumulateGrad leaves (x and the 16 parameters); a padded batch
/// adds x's reshape into rows and the result's view back.
int64_t fused_graph_nodes(Rows rows) {
  return 1 + 17 + (rows == Rows::kPadded ? 2 : 0);
}

TEST(FusedPostLnBlock, EqualsCompositeOnPaddedAndPackedRowsInFloat64) {
  for (const Rows rows : {Rows::kPadded, Rows::kPacked}) {
    SCOPED_TRACE(rows == Rows::kPacked ? "packed" : "padded");
    const LayerResult fused = run_layer(BlockKernel::kFused, torch::kFloat64, rows);
    const LayerResult composite = run_layer(BlockKernel::kComposite, torch::kFloat64, rows);
    EXPECT_EQ(fused.graph_nodes, fused_graph_nodes(rows));
    EXPECT_GT(composite.graph_nodes, 2 * fused.graph_nodes);
    expect_close(fused, composite, 1e-12);
  }
}

TEST(FusedPostLnBlock, FillerRowsChangeNothingForTheRealTokensAndGetNoGradient) {
  for (const BlockKernel kernel : {BlockKernel::kFused, BlockKernel::kComposite}) {
    SCOPED_TRACE(kernel == BlockKernel::kFused ? "fused" : "composite");
    const LayerResult with = run_layer(kernel, torch::kFloat64, Rows::kPackedWithFillers);
    const LayerResult without = run_layer(kernel, torch::kFloat64, Rows::kPacked);
    ASSERT_EQ(with.output.size(0), kRealTokens + kFillers);
    EXPECT_LT(relative_difference(with.output.narrow(0, 0, kRealTokens), without.output), 1e-13);
    EXPECT_TRUE(torch::isfinite(with.output).all().item<bool>());
    EXPECT_LT(relative_difference(with.dx.narrow(0, 0, kRealTokens), without.dx), 1e-13);
    EXPECT_EQ(with.dx.narrow(0, kRealTokens, kFillers).abs().sum().item<double>(), 0.0);
    for (size_t i = 0; i < with.parameter_grads.size(); ++i) {
      if (i != kKeyBias) {
        EXPECT_LT(relative_difference(with.parameter_grads[i], without.parameter_grads[i]), 1e-13)
            << "parameter " << i;
      }
    }
  }
  expect_close(run_layer(BlockKernel::kFused, torch::kFloat64, Rows::kPackedWithFillers),
               run_layer(BlockKernel::kComposite, torch::kFloat64, Rows::kPackedWithFillers),
               1e-12);
}

TEST(FusedPostLnBlock, EqualsCompositeInFloat32) {
  for (const Rows rows : {Rows::kPadded, Rows::kPacked}) {
    SCOPED_TRACE(rows == Rows::kPacked ? "packed" : "padded");
    expect_close(run_layer(BlockKernel::kFused, torch::kFloat32, rows),
                 run_layer(BlockKernel::kComposite, torch::kFloat32, rows), 1e-5);
  }
}

TEST(FusedPostLnBlock, RoundsLikeAutocastUnderBf16) {
  const ScopedBf16Matmul native(Bf16Matmul::kNative);
  for (const Rows rows : {Rows::kPadded, Rows::kPacked}) {
    SCOPED_TRACE(rows == Rows::kPacked ? "packed" : "padded");
    const LayerResult fused = run_layer(BlockKernel::kFused, torch::kFloat32, rows, true);
    const LayerResult composite = run_layer(BlockKernel::kComposite, torch::kFloat32, rows, true);
    ASSERT_EQ(fused.graph_nodes, fused_graph_nodes(rows));   // the fused layer ran under autocast
    EXPECT_EQ(fused.output.scalar_type(), torch::kFloat32);  // LayerNorm's results stay fp32
    // Both round the products' operands and results to bf16 alike; x's gradient through the
    // query, key and value products is rounded once here, once per product there.
    expect_close(fused, composite, 1e-2);
    // Both are bf16 arithmetic, far from float32's, and the fused layer is no further from it.
    const LayerResult fp32 = run_layer(BlockKernel::kComposite, torch::kFloat32, rows);
    const double fused_error = relative_difference(fused.dx, fp32.dx);
    EXPECT_GT(fused_error, 1e-3);
    EXPECT_LT(fused_error, 1.25 * relative_difference(composite.dx, fp32.dx));
    EXPECT_LT(relative_difference(fused.output, fp32.output),
              1.25 * relative_difference(composite.output, fp32.output));
  }
}

TEST(FusedPostLnBlock, AddsEveryBf16WeightGradientToGradItselfBitwise) {
  const ScopedBf16Matmul native(Bf16Matmul::kNative);
  const LayerResult returned =
      run_layer(BlockKernel::kFused, torch::kFloat32, Rows::kPackedWithFillers, true);
  const int64_t before = direct_weight_grads_added();
  const LayerResult direct = run_layer(BlockKernel::kFused, torch::kFloat32,
                                       Rows::kPackedWithFillers, true, nullptr, true);
  // The query, key and value weights (one product, its rows split), the projection's and the
  // feed-forward network's two.
  EXPECT_EQ(direct_weight_grads_added() - before, 6);
  ASSERT_EQ(direct.parameter_grads.size(), returned.parameter_grads.size());
  for (size_t i = 0; i < direct.parameter_grads.size(); ++i)
    EXPECT_TRUE(torch::equal(direct.parameter_grads[i], returned.parameter_grads[i]))
        << "parameter " << i;
  EXPECT_TRUE(torch::equal(direct.dx, returned.dx));
}

TEST(FusedPostLnBlock, FrozenParametersGetNoGradient) {
  const auto frozen = [](torch::ScalarType dtype) {
    HfBertLayer layer = random_layer(dtype);
    layer->key->weight.requires_grad_(false);
    layer->value->bias.requires_grad_(false);
    layer->attention_norm->bias.requires_grad_(false);
    layer->intermediate_dense->weight.requires_grad_(false);
    return layer;
  };
  const HfBertLayer layer = frozen(torch::kFloat64);
  const LayerResult fused =
      run_layer(BlockKernel::kFused, torch::kFloat64, Rows::kPacked, false, layer);
  const LayerResult composite = run_layer(BlockKernel::kComposite, torch::kFloat64, Rows::kPacked,
                                          false, frozen(torch::kFloat64));
  EXPECT_EQ(fused.graph_nodes, fused_graph_nodes(Rows::kPacked) - 4);
  const auto parameters = layer->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(fused.parameter_grads[i].defined(), parameters[i].requires_grad());
    if (parameters[i].requires_grad() && i != kKeyBias) {
      EXPECT_LT(relative_difference(fused.parameter_grads[i], composite.parameter_grads[i]), 1e-12);
    }
  }
  EXPECT_LT(relative_difference(fused.dx, composite.dx), 1e-12);
}

TEST(FusedPostLnBlock, LeavesAdaptersAndNarrowFrozenWeightsToTheCompositeLayer) {
  HfBertLayer adapted = random_layer(torch::kFloat32);
  adapted->value->add_lora(/*rank=*/2, /*alpha=*/4.0, /*dropout=*/0.0);
  EXPECT_GT(
      run_layer(BlockKernel::kFused, torch::kFloat32, Rows::kPacked, false, adapted).graph_nodes,
      fused_graph_nodes(Rows::kPacked) + 2);
  HfBertLayer narrow = random_layer(torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    narrow->output_dense->weight.set_data(narrow->output_dense->weight.to(torch::kBFloat16));
  }
  narrow->output_dense->weight.requires_grad_(false);
  const LayerResult result =
      run_layer(BlockKernel::kFused, torch::kFloat32, Rows::kPadded, false, narrow);
  EXPECT_GT(result.graph_nodes, fused_graph_nodes(Rows::kPadded));
}

TEST(FusedPostLnBlock, RefusesASecondDerivativeASecondBackwardAndAChangedInput) {
  const ScopedBlockKernel choice(BlockKernel::kFused);
  HfBertLayer layer = random_layer(torch::kFloat64);
  const PackedTokens tokens = pack_tokens(example_attention_mask());
  const torch::Tensor x =
      torch::randn({tokens.real.size(0), kHidden}, torch::kFloat64).requires_grad_();
  const torch::Tensor loss = layer->forward(x, tokens).pow(2).sum();
  using testing::logic_error_of;
  const std::string second_derivative = logic_error_of([&] {
    torch::autograd::grad({loss}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  });
  EXPECT_NE(second_derivative.find("no second derivative"), std::string::npos) << second_derivative;
  const torch::Tensor other = layer->forward(x, tokens).sum();
  other.backward({}, /*retain_graph=*/true);
  const std::string twice = logic_error_of([&] { other.backward(); });
  EXPECT_NE(twice.find("backward ran twice"), std::string::npos) << twice;
  {
    torch::NoGradGuard no_grad;
    layer->value->weight.add_(1.0);  // as an optimizer step inside the window would
  }
  const std::string changed = logic_error_of([&] { loss.backward(); });
  EXPECT_NE(changed.find("changed in place"), std::string::npos) << changed;
  EXPECT_NE(changed.find("input 3 "), std::string::npos) << changed;  // x, query, key, value
}

TEST(FusedPostLnBlock, RefusesRowsThatDoNotFitTheirSequences) {
  HfBertLayer layer = random_layer(torch::kFloat32);
  const PostLnBlockParameters parameters = layer->fused_parameters();
  const torch::Tensor x = torch::randn({5, kHidden});
  const auto error_of = [&](const BlockRows& rows) {
    return testing::logic_error_of([&] {
      fused_post_ln_block(x, parameters, {kHeads, 1e-12}, rows);
    });
  };
  const std::string unplaced = error_of({2, 3, {}, {}});
  EXPECT_NE(unplaced.find("5 rows do not fit 2 sequences of 3"), std::string::npos) << unplaced;
  const std::string short_slots = error_of({2, 3, torch::arange(4), {}});
  EXPECT_NE(short_slots.find("through [4] slots"), std::string::npos) << short_slots;
  const std::string fillers = error_of({2, 3, torch::arange(3), {}, 1});  // 3 + 1 rows, not 5
  EXPECT_NE(fillers.find("through [3] slots and 1 fillers"), std::string::npos) << fillers;
  EXPECT_EQ(fused_post_ln_block(x, parameters, {kHeads, 1e-12}, {1, 5, {}, {}}).sizes(), x.sizes());
}

/// The weights of a BERT classifier after `steps` AdamW steps, each a window of 8 texts of
/// uneven lengths run as micro-batches of 3, 3 and 2 (the padding skipped, so the layers run on
/// packed tokens), the loss divided by the window's samples, clipped at norm 1. In float64.
/// The key biases are left out: AdamW scales their gradients' rounding noise into steps.
std::vector<torch::Tensor> train_bert(BlockKernel kernel, int64_t steps) {
  const ScopedBlockKernel choice(kernel);
  torch::manual_seed(3);
  models::HfBert model(small_config());
  model->to(torch::kFloat64);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  for (int64_t step = 0; step < steps; ++step) {
    const torch::Tensor lengths = torch::randint(1, 11, {8}, torch::kLong);
    const torch::Tensor mask = torch::arange(10).unsqueeze(0).lt(lengths.unsqueeze(1));  // (8, 10)
    const torch::Tensor ids = torch::randint(1, 50, {8, 10}, torch::kLong).mul(mask);
    const torch::Tensor labels = torch::randint(3, {8}, torch::kLong);
    optimizer.zero_grad();
    int64_t start = 0;
    for (const int64_t size : {3, 3, 2}) {
      const torch::Tensor logits =
          model->forward(ids.narrow(0, start, size), mask.narrow(0, start, size));
      (torch::nn::functional::cross_entropy(
           logits, labels.narrow(0, start, size),
           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
       8.0)
          .backward();
      start += size;
    }
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
  }
  std::vector<torch::Tensor> weights;
  for (const auto& item : model->named_parameters())
    if (item.key().find("attention.self.key.bias") == std::string::npos)
      weights.push_back(item.value().detach().clone());
  return weights;
}

TEST(FusedPostLnBlock, TrainsABertClassifierAsTheCompositeLayerDoesOverManyWindows) {
  const std::vector<torch::Tensor> fused = train_bert(BlockKernel::kFused, 12);
  const std::vector<torch::Tensor> composite = train_bert(BlockKernel::kComposite, 12);
  ASSERT_EQ(fused.size(), composite.size());
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_LT(relative_difference(fused[i], composite[i]), 1e-10) << "parameter " << i;
}

}  // namespace
}  // namespace bigbatch::nn
