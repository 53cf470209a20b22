#include "bigbatch/models/resnet.h"

#include <memory>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_matmul.h"

namespace bigbatch::models {
namespace {

/// A square convolution without bias; padding keeps the size for stride 1.
torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

void validate(const ResNetOptions& options) {
  BB_CHECK_INPUT(options.depth() >= 8 && (options.depth() - 2) % 6 == 0,
                 "ResNetOptions.depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, 44, 56, ...), "
                 "got ",
                 options.depth());
  BB_CHECK_INPUT(options.width() > 0, "ResNetOptions.width must be positive, got ",
                 options.width());
  BB_CHECK_INPUT(options.in_channels() > 0, "ResNetOptions.in_channels must be positive, got ",
                 options.in_channels());
  BB_CHECK_INPUT(options.classes() > 0, "ResNetOptions.classes must be positive, got ",
                 options.classes());
}

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride,
                               nn::NormKind norm) {
  BB_CHECK_INPUT(in_channels > 0 && out_channels > 0,
                 "BasicBlock channels must be positive, got in_channels ", in_channels,
                 " and out_channels ", out_channels);
  BB_CHECK_INPUT(stride >= 1, "BasicBlock stride must be >= 1, got ", stride);
  conv1 = register_module("conv1", conv(in_channels, out_channels, 3, stride));
  norm1 = nn::make_norm(norm, out_channels);
  register_module("norm1", norm1.ptr());
  conv2 = register_module("conv2", conv(out_channels, out_channels, 3, 1));
  norm2 = nn::make_norm(norm, out_channels);
  register_module("norm2", norm2.ptr());
  if (stride != 1 || in_channels != out_channels) {
    shortcut_conv = register_module("shortcut_conv", conv(in_channels, out_channels, 1, stride));
    shortcut_norm = nn::make_norm(norm, out_channels);
    register_module("shortcut_norm", shortcut_norm.ptr());
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  // Each norm runs with the add and ReLU after it in one step where it can (nn::norm_forward).
  const torch::Tensor h =
      nn::norm_forward(norm1, conv1->forward(x), {{}, /*relu=*/true});  // (B, out, H', W')
  const torch::Tensor shortcut =
      projects() ? nn::norm_forward(shortcut_norm, shortcut_conv->forward(x), {})
                 : x;                                                            // (B, out, H', W')
  return nn::norm_forward(norm2, conv2->forward(h), {shortcut, /*relu=*/true});  // (B, out, H', W')
}

ResNetImpl::ResNetImpl(ResNetOptions options) : options_(options) {
  validate(options_);
  const int64_t width = options_.width();
  stem_conv = register_module("stem_conv", conv(options_.in_channels(), width, 3, 1));
  stem_norm = nn::make_norm(options_.norm(), width);
  register_module("stem_norm", stem_norm.ptr());
  blocks = register_module("blocks", torch::nn::ModuleList());
  const int64_t per_stage = (options_.depth() - 2) / 6;
  int64_t channels = width;
  for (int64_t stage = 0; stage < 3; ++stage) {
    const int64_t out_channels = width << stage;  // width, 2*width, 4*width
    for (int64_t i = 0; i < per_stage; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      blocks->push_back(BasicBlock(channels, out_channels, stride, options_.norm()));
      channels = out_channels;
    }
  }
  head = register_module("head", torch::nn::Linear(channels, options_.classes()));
  reset_parameters();
}

void ResNetImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* convolution = module->as<torch::nn::Conv2d>()) {
      // Drawn in (out, in, kh, kw) order, so the values do not depend on the layout, then kept
      // channels-last: with such weights oneDNN runs the convolutions, and everything after
      // them, on NHWC activations instead of reordering each one to its own layout and back
      // (faster; measured in docs/BENCHMARKS.md, "What changed on 2026-12-01 (afternoon)", 4b).
      torch::Tensor weight = torch::empty(convolution->weight.sizes(),
                                          convolution->weight.options());  // (out, in, kh, kw)
      torch::nn::init::kaiming_normal_(weight, /*a=*/0.0, torch::kFanOut, torch::kReLU);
      // Copied into channels-last strides: contiguous(ChannelsLast) would keep a one-channel
      // stem's (out, 1, kh, kw) weight as it is, whose convolution then writes NCHW.
      convolution->weight.set_data(
          torch::empty(weight.sizes(),
                       weight.options().memory_format(torch::MemoryFormat::ChannelsLast))
              .copy_(weight));
    } else if (auto* batch_norm = module->as<nn::BatchNormImpl>()) {
      batch_norm->reset_parameters();
    } else if (auto* group_norm = module->as<torch::nn::GroupNorm>()) {
      torch::nn::init::ones_(group_norm->weight);
      torch::nn::init::zeros_(group_norm->bias);
    } else if (auto* linear = module->as<torch::nn::Linear>()) {
      linear->reset_parameters();
    }
  }
}

void ResNetImpl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& images) {
  BB_CHECK_INPUT(images.dim() == 4, "ResNet expects images of shape (B, C, H, W) but got ",
                 images.sizes());
  BB_CHECK_INPUT(images.size(1) == options_.in_channels(), "ResNet expects ",
                 options_.in_channels(), " channels (ResNetOptions.in_channels) but got images ",
                 images.sizes());
  BB_CHECK_INPUT(images.is_floating_point(), "ResNet expects floating-point images but got ",
                 images.scalar_type());
  torch::Tensor x =
      nn::norm_forward(stem_norm, stem_conv->forward(images), {{}, /*relu=*/true});  // (B, w, H, W)
  const bool may_checkpoint = is_training() && torch::GradMode::is_enabled();
  for (size_t i = 0; i < blocks->size(); ++i) {
    std::shared_ptr<BasicBlockImpl> block = blocks->ptr<BasicBlockImpl>(i);
    if (may_checkpoint && checkpointing_.applies_to(int64_t(i))) {
      const std::vector<torch::Tensor> parameters = block->parameters();
      x = nn::checkpoint([block](const torch::Tensor& in) { return block->forward(in); }, x,
                         parameters);  // (B, C_i, H_i, W_i)
    } else {
      x = block->forward(x);  // (B, C_i, H_i, W_i)
    }
  }
  const torch::Tensor pooled = x.mean({2, 3});  // (B, 4w)
  return nn::linear(head, pooled);              // (B, classes)
}

}  // namespace bigbatch::models
