#include "bigbatch/models/resnet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "bigbatch/models/model_info.h"
#include "bigbatch/nn/norm.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using bigbatch::testing::input_error_of;
using nn::NormKind;

const std::vector<NormKind> kAllNorms = {NormKind::kBatch, NormKind::kGroup, NormKind::kLayer,
                                         NormKind::kInstance};

/// Expects `message` to contain every one of `parts`.
void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

TEST(ResNet, EveryDepthAndNormGivesLogitsAndTheSameParameterCount) {
  // Parameter counts of width 16, in_channels 1, 10 classes, from a PyTorch mirror of the
  // architecture (torchvision-style projection shortcuts).
  const std::map<int64_t, int64_t> expected = {{8, 77754},   {14, 174970}, {20, 272186},
                                               {32, 466618}, {44, 661050}, {56, 855482}};
  torch::manual_seed(0);
  const torch::Tensor images = torch::randn({2, 1, 8, 8});  // (B, C, H, W)
  for (const auto& [depth, count] : expected) {
    for (const NormKind norm : kAllNorms) {
      SCOPED_TRACE("depth " + std::to_string(depth) + ", norm " + nn::to_string(norm));
      ResNet model(ResNetOptions().depth(depth).norm(norm));
      EXPECT_EQ(int64_t(model->blocks->size()), 3 * (depth - 2) / 6);
      EXPECT_EQ(parameter_count(*model), count);
      const torch::Tensor logits = model->forward(images);
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10}));
      EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
      EXPECT_EQ(nn::count_batch_norms(*model), norm == NormKind::kBatch ? depth + 1 : 0)
          << "stem + two per block + two projections";
    }
  }
}

TEST(ResNet, ResNet20OnRgbHasThePapers027MParameters) {
  // Hand count, width 16, 3 input channels: stem 3*16*9 + 32 = 464; stage 1: 3 blocks of
  // 2*(16*16*9) + 2*32 = 4672; stage 2: first block 16*32*9 + 32*32*9 + 2*64 + (16*32 + 64)
  // = 14528, then 2 x (2*9216 + 128); stage 3: 32*64*9 + 64*64*9 + 2*128 + (32*64 + 128) =
  // 57728, then 2 x (2*36864 + 256); head 64*10 + 10. The paper's option-A shortcuts (zero
  // padding) would have 2752 fewer: 269722.
  const int64_t stem = 3 * 16 * 9 + 32;
  const int64_t stage1 = 3 * (2 * 16 * 16 * 9 + 2 * 32);
  const int64_t stage2 =
      (16 * 32 * 9 + 32 * 32 * 9 + 2 * 64 + 16 * 32 + 64) + 2 * (2 * 32 * 32 * 9 + 2 * 64);
  const int64_t stage3 =
      (32 * 64 * 9 + 64 * 64 * 9 + 2 * 128 + 32 * 64 + 128) + 2 * (2 * 64 * 64 * 9 + 2 * 128);
  const int64_t head = 64 * 10 + 10;
  EXPECT_EQ(stem + stage1 + stage2 + stage3 + head, 272474);
  for (const NormKind norm : kAllNorms) {
    ResNet model(ResNetOptions().depth(20).width(16).in_channels(3).norm(norm));
    EXPECT_EQ(parameter_count(*model), 272474) << nn::to_string(norm);
  }
}

TEST(ResNet, StagesHalveTheSizeAndDoubleTheChannels) {
  ResNet model(ResNetOptions().depth(14).width(4));
  std::vector<bool> projects;
  for (size_t i = 0; i < model->blocks->size(); ++i)
    projects.push_back(model->blocks->ptr<BasicBlockImpl>(i)->projects());
  EXPECT_EQ(projects, (std::vector<bool>{false, false, true, false, true, false}));
  torch::Tensor x = torch::relu(model->stem_norm.forward(
      model->stem_conv->forward(torch::randn({2, 1, 28, 28}))));  // (2, 4, 28, 28)
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < model->blocks->size(); ++i) {
    x = model->blocks->ptr<BasicBlockImpl>(i)->forward(x);
    shapes.push_back(x.sizes().vec());
  }
  EXPECT_EQ(shapes, (std::vector<std::vector<int64_t>>{{2, 4, 28, 28},
                                                       {2, 4, 28, 28},
                                                       {2, 8, 14, 14},
                                                       {2, 8, 14, 14},
                                                       {2, 16, 7, 7},
                                                       {2, 16, 7, 7}}));
  EXPECT_EQ(model->forward(torch::randn({3, 1, 32, 32})).sizes(), (std::vector<int64_t>{3, 10}));
}

TEST(ResNet, NamesFollowTheBlocks) {
  ResNet model(ResNetOptions().depth(8).width(4).norm(NormKind::kGroup));
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters())
    names.push_back(item.key());
  const std::vector<std::string> first = {"stem_conv.weight",      "stem_norm.weight",
                                          "stem_norm.bias",        "blocks.0.conv1.weight",
                                          "blocks.0.norm1.weight", "blocks.0.norm1.bias",
                                          "blocks.0.conv2.weight", "blocks.0.norm2.weight",
                                          "blocks.0.norm2.bias",   "blocks.1.conv1.weight"};
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 10), first);
  EXPECT_EQ(names.back(), "head.bias");
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("blocks.1.shortcut_conv.weight"));
  EXPECT_TRUE(params.contains("blocks.2.shortcut_norm.bias"));
  EXPECT_EQ(model->named_buffers().size(), 0u);  // GroupNorm keeps no statistics

  ResNet batch(ResNetOptions().depth(8).width(4));
  const auto buffers = batch->named_buffers();
  EXPECT_TRUE(buffers.contains("blocks.1.shortcut_norm.running_var"));
  EXPECT_TRUE(buffers.contains("stem_norm.num_batches_tracked"));
}

TEST(ResNet, ConvolutionsAreKaimingFanOut) {
  torch::manual_seed(1);
  ResNet model(ResNetOptions().depth(8).width(16));
  const auto params = model->named_parameters();
  const torch::Tensor conv = params["blocks.2.conv2.weight"];  // (64, 64, 3, 3)
  const double expected = std::sqrt(2.0 / (64 * 9));
  EXPECT_NEAR(conv.std().item<double>(), expected, 0.03 * expected);
  EXPECT_TRUE(torch::equal(params["blocks.0.norm1.weight"], torch::ones({16})));
  EXPECT_TRUE(torch::equal(params["blocks.0.norm1.bias"], torch::zeros({16})));
}

/// 32 fixed samples of 4 classes: a fixed random prototype per class plus noise, (1, 8, 8).
std::pair<torch::Tensor, torch::Tensor> tiny_images() {
  const torch::Tensor prototypes = torch::randn({4, 1, 8, 8});       // (classes, 1, 8, 8)
  const torch::Tensor labels = torch::arange(32, torch::kLong) % 4;  // (32)
  const torch::Tensor images =
      prototypes.index_select(0, labels) + 0.5 * torch::randn({32, 1, 8, 8});
  return {images, labels};
}

TEST(ResNet, LossFallsOnATinyTask) {
  for (const NormKind norm : {NormKind::kBatch, NormKind::kGroup}) {
    SCOPED_TRACE(nn::to_string(norm));
    torch::manual_seed(2);
    const auto [images, labels] = tiny_images();
    ResNet model(ResNetOptions().depth(8).width(8).classes(4).norm(norm));
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
    std::vector<double> losses;
    for (int step = 0; step < 8; ++step) {
      optimizer.zero_grad();
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(images), labels);
      loss.backward();
      optimizer.step();
      losses.push_back(loss.item<double>());
    }
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << "losses " << torch::tensor(losses);
  }
}

TEST(ResNet, PerWindowStatisticsReachEveryBatchNorm) {
  torch::manual_seed(3);
  ResNet model(ResNetOptions().depth(8).width(4));
  nn::set_running_stats_mode(*model, nn::RunningStatsMode::kPerWindow);
  const auto norms = nn::batch_norms_of(*model);
  EXPECT_EQ(norms.size(), 9u);
  const torch::Tensor images = torch::randn({6, 1, 8, 8});
  for (const auto& micro : images.split(3))
    model->forward(micro).sum().backward();
  for (const auto* norm : norms) {
    EXPECT_GT(norm->window_count(), 0);
    EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);
  }
  nn::commit_window(*model);
  for (const auto* norm : norms)
    EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 1);
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(images), model->forward(images)));
}

TEST(ResNet, InvalidOptionsAndInputsNameFieldAndValue) {
  expect_contains(input_error_of([] { ResNet(ResNetOptions().depth(21)); }),
                  {"ResNetOptions.depth", "6n + 2", "21"});
  expect_contains(input_error_of([] { ResNet(ResNetOptions().depth(2)); }),
                  {"ResNetOptions.depth", "2"});
  expect_contains(input_error_of([] { ResNet(ResNetOptions().width(0)); }),
                  {"ResNetOptions.width", "0"});
  expect_contains(input_error_of([] { ResNet(ResNetOptions().in_channels(-1)); }),
                  {"ResNetOptions.in_channels", "-1"});
  expect_contains(input_error_of([] { ResNet(ResNetOptions().classes(0)); }),
                  {"ResNetOptions.classes", "0"});
  ResNet model(ResNetOptions().depth(8).width(4).in_channels(3));
  expect_contains(input_error_of([&] {
                    model->forward(torch::randn({2, 1, 8, 8}));
                  }),
                  {"3 channels", "ResNetOptions.in_channels", "[2, 1, 8, 8]"});
  expect_contains(input_error_of([&] {
                    model->forward(torch::randn({2, 3, 8}));
                  }),
                  {"(B, C, H, W)", "[2, 3, 8]"});
  expect_contains(input_error_of([&] {
                    model->forward(torch::zeros({2, 3, 8, 8}, torch::kLong));
                  }),
                  {"floating", "Long"});
}

}  // namespace
}  // namespace bigbatch::models
