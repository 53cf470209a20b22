// A CIFAR-style residual network (He et al. 2016, "Deep Residual Learning", section 4.2).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "bigbatch/nn/norm.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// Hyper-parameters of ResNet. Usage:
/// `ResNet model(ResNetOptions().depth(20).in_channels(3).norm(nn::NormKind::kGroup));`
struct ResNetOptions {
  /// Number of weighted layers, 6n + 2 with n >= 1 BasicBlocks per stage: 8, 14, 20, 32, 44,
  /// 56, ...
  TORCH_ARG(int64_t, depth) = 8;
  /// Channels of the stem and of stage 1; stages 2 and 3 have 2 and 4 times as many.
  TORCH_ARG(int64_t, width) = 16;
  /// Channels of the input images (1 for Fashion-MNIST, 3 for CIFAR).
  TORCH_ARG(int64_t, in_channels) = 1;
  /// Number of classes the head scores.
  TORCH_ARG(int64_t, classes) = 10;
  /// The normalisation after every convolution (see nn::make_norm).
  TORCH_ARG(nn::NormKind, norm) = nn::NormKind::kBatch;
};

/// Throws bigbatch::InputError naming the field and its value unless depth = 6n + 2 with
/// n >= 1 and width, in_channels and classes are positive.
void validate(const ResNetOptions& options);

/// The basic residual block: relu(norm1(conv1(x))) -> norm2(conv2(.)) + shortcut(x) -> relu.
/// conv1 is 3x3 with `stride`, conv2 3x3 with stride 1, both without bias. The shortcut is the
/// identity when the shape is kept and a 1x1 convolution with `stride` + norm (projection,
/// option B of the paper) when the stride or the channel count changes.
/// Submodules: `conv1`, `norm1`, `conv2`, `norm2`, and `shortcut_conv`, `shortcut_norm` when
/// projecting.
class BasicBlockImpl : public torch::nn::Module {
 public:
  /// A block from `in_channels` to `out_channels` channels that strides by `stride` (1 or 2).
  BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride, nn::NormKind norm);
  /// x (B, in_channels, H, W) -> (B, out_channels, H / stride, W / stride) (rounded up).
  torch::Tensor forward(const torch::Tensor& x);

  /// Whether the shortcut is a projection (shortcut_conv + shortcut_norm).
  bool projects() const { return !shortcut_conv.is_empty(); }

  /// 3x3 convolution, stride `stride`.
  torch::nn::Conv2d conv1{nullptr};
  /// Norm after conv1.
  torch::nn::AnyModule norm1;
  /// 3x3 convolution, stride 1.
  torch::nn::Conv2d conv2{nullptr};
  /// Norm after conv2.
  torch::nn::AnyModule norm2;
  /// 1x1 projection of the shortcut; empty for an identity shortcut.
  torch::nn::Conv2d shortcut_conv{nullptr};
  /// Norm after shortcut_conv; empty for an identity shortcut.
  torch::nn::AnyModule shortcut_norm;
};
/// Module holder for BasicBlockImpl.
TORCH_MODULE(BasicBlock);

/// CIFAR-style ResNet: stem (3x3 conv in_channels -> width, norm, ReLU), three stages of n
/// BasicBlocks with width, 2*width and 4*width channels (stages 2 and 3 start with stride 2),
/// global average pooling and a Linear head.
/// Submodules: `stem_conv`, `stem_norm`, `blocks.<i>` (i = 0 .. 3n-1, stage by stage), `head`.
/// Initialised like torchvision: convolutions Kaiming-normal (fan_out, ReLU gain), norm
/// weights 1 and biases 0, the head with LibTorch's default Linear initialisation.
/// Batch-norm running statistics can be kept per accumulation window with
/// `nn::set_running_stats_mode(*model, nn::RunningStatsMode::kPerWindow)` and
/// `nn::commit_window(*model)`; checkpointed blocks update them once per forward.
/// Activation checkpointing (off by default) recomputes the chosen blocks during backward;
/// gradients and running statistics stay bit-identical:
///   model->set_checkpointing(nn::parse_checkpoint_policy("every:2", "checkpointing"));
class ResNetImpl : public torch::nn::Module {
 public:
  /// Builds and initialises the model; validates `options` first.
  explicit ResNetImpl(ResNetOptions options = {});

  /// images (B, in_channels, H, W) floating -> logits (B, classes). Throws
  /// bigbatch::InputError for another rank, channel count or dtype. In training mode with grad
  /// mode on, block i runs under nn::checkpoint when the checkpointing policy applies to i.
  torch::Tensor forward(const torch::Tensor& images);

  /// Chooses which blocks forward() checkpoints; throws bigbatch::InputError for an invalid
  /// policy (see nn::validate). Do not switch train()/eval() between a checkpointed forward and
  /// its backward.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }

  /// Re-draws every parameter with the initialisation described above (running statistics
  /// are reset too).
  void reset_parameters();

  /// The options the model was built with.
  const ResNetOptions& options() const { return options_; }

  /// 3x3 convolution in_channels -> width, no bias.
  torch::nn::Conv2d stem_conv{nullptr};
  /// Norm after the stem convolution.
  torch::nn::AnyModule stem_norm;
  /// The 3n BasicBlock modules, applied in order.
  torch::nn::ModuleList blocks{nullptr};
  /// Linear(4*width, classes).
  torch::nn::Linear head{nullptr};

 private:
  ResNetOptions options_;
  nn::CheckpointPolicy checkpointing_;
};
/// Module holder for ResNetImpl.
TORCH_MODULE(ResNet);

}  // namespace bigbatch::models
