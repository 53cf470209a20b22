// Normalisation layers: a BatchNorm that knows about accumulation windows and activation
// checkpointing, and a choice of norm (batch, group, layer, instance) for models to build with.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bigbatch/nn/concurrent_forward.h"
#include "bigbatch/nn/fused_batch_norm.h"

namespace bigbatch::nn {

/// Which normalisation a model builds after each convolution.
enum class NormKind {
  /// nn::BatchNorm: statistics over the batch (and space); running statistics for eval.
  kBatch,
  /// GroupNorm with group_norm_groups(C) groups: statistics per sample, no batch dependence.
  kGroup,
  /// GroupNorm(1, C): statistics per sample over all channels and positions.
  kLayer,
  /// GroupNorm(C, C): statistics per sample and channel over positions.
  kInstance,
};

/// Reads "batch", "group", "layer" or "instance"; anything else throws bigbatch::InputError
/// naming `field`, `text` and the accepted values.
NormKind parse_norm_kind(const std::string& text, const std::string& field);
/// The text form that parse_norm_kind reads.
std::string to_string(NormKind kind);

/// When nn::BatchNorm updates its running statistics during training.
enum class RunningStatsMode {
  /// After every training forward, with that forward's batch statistics (PyTorch's behaviour).
  kPerCall,
  /// Once per accumulation window, at commit_window(), with the statistics of every sample the
  /// window's training forwards saw ("ghost batch norm": normalise per micro-batch, keep the
  /// statistics of the whole window, one momentum step per optimizer step).
  kPerWindow,
};

/// Reads "per_call" or "per_window"; anything else throws bigbatch::InputError naming `field`,
/// `text` and the accepted values.
RunningStatsMode parse_running_stats_mode(const std::string& text, const std::string& field);
/// The text form that parse_running_stats_mode reads.
std::string to_string(RunningStatsMode mode);

/// Hyper-parameters of nn::BatchNorm. Usage: `BatchNorm bn(BatchNormOptions(64).momentum(0.2));`
struct BatchNormOptions {
  /// Options for `num_features` channels with PyTorch's defaults (implicit, like LibTorch's).
  /* implicit */ BatchNormOptions(int64_t num_features);  // NOLINT(google-explicit-constructor)
  /// Number of channels C.
  TORCH_ARG(int64_t, num_features);
  /// Added to the variance before the square root; must be positive.
  TORCH_ARG(double, eps) = 1e-5;
  /// Weight of the new statistics in each running-statistics update, in [0, 1].
  TORCH_ARG(double, momentum) = 0.1;
  /// When running statistics are updated (see RunningStatsMode).
  TORCH_ARG(RunningStatsMode, running_stats) = RunningStatsMode::kPerCall;
  /// Whether a training forward_with() runs nn::fused_batch_norm_train where it supports the
  /// tensors (CPU float32 or bfloat16 rows: (B, C), or channels-last (B, C, H, W)). false:
  /// forward(), then the residual add and the ReLU as separate operations (with a second
  /// derivative).
  TORCH_ARG(bool, fused) = true;
};

/// Throws bigbatch::InputError naming the field and its value unless num_features > 0,
/// eps > 0 and momentum lies in [0, 1].
void validate(const BatchNormOptions& options);

/// Batch normalisation of (B, C) or (B, C, H, W) inputs with PyTorch's parameters, buffers and
/// semantics (torch.nn.BatchNorm1d/2d with affine and track_running_stats): parameters `weight`
/// (C, ones) and `bias` (C, zeros); buffers `running_mean` (C, zeros), `running_var` (C, ones)
/// and `num_batches_tracked` (int64 scalar). Training normalises with the batch's mean and
/// biased variance; a running-statistics update is
///   running = (1 - momentum) * running + momentum * statistic
/// with the unbiased variance, and adds 1 to num_batches_tracked. Eval normalises with the
/// running statistics.
///
/// Two additions to PyTorch:
/// - RunningStatsMode::kPerWindow: a training forward normalises with its own batch statistics
///   but only accumulates them; commit_window() makes one update with the mean and unbiased
///   variance of everything accumulated since the last commit or discard (what one forward over
///   the concatenated micro-batches would have given), discard_window() drops them. Usage, with
///   the free functions below that reach every BatchNorm of a model:
///     set_running_stats_mode(*model, RunningStatsMode::kPerWindow);
///     for each window: for each micro-batch: forward + backward;
///                      optimizer step; commit_window(*model);   // or discard_window(*model)
///   The accumulated statistics are detached and held in float64: per forward, the mean and
///   the sum of squared deviations from it per channel (two passes over the input in its own
///   precision, float32 at least) are merged into a count, mean and sum of squared deviations
///   with Chan et al.'s pairwise rule, so the error does not grow with the number of
///   micro-batches and no sum of squares cancels. The cost is about one extra read of the input
///   and one temporary of its size per forward. They are not buffers: a saved model does not
///   carry a pending window.
/// - Activation checkpointing: while nn::is_recomputing() is true (nn::checkpoint's backward
///   replaying a block), no running statistic is updated or accumulated, so a checkpointed
///   block changes them exactly once per forward, as a plain block does.
/// - Concurrent micro-batches: while nn::in_concurrent_forward() is true, a training forward
///   hands its statistics write to nn::defer_state_write, so the passes' writes are made in
///   micro-batch order after them (engine::ConcurrentMicroBatches), as one at a time would. That
///   needs statistics computed here: the fused kernel of forward_with(), or kPerWindow. A per-call
///   forward() on ATen's kernel, which writes the running statistics itself, throws InputError.
class BatchNormImpl : public torch::nn::Module {
 public:
  /// Builds the parameters and buffers; validates `options` first.
  explicit BatchNormImpl(BatchNormOptions options);

  /// input (B, C) or (B, C, H, W) floating -> the same shape. Throws bigbatch::InputError for
  /// another rank, a channel count other than num_features, or (in training) a single value per
  /// channel, whose variance is undefined.
  torch::Tensor forward(const torch::Tensor& input);

  /// forward(input), then `epilogue`'s residual add and ReLU: relu(forward(x) + residual). A
  /// training forward with options().fused() on tensors that fused_batch_norm_supported() runs
  /// as one fused node (equal to the separate operations within float rounding, no second
  /// derivative), whose batch statistics also feed the running statistics without another pass
  /// over the input. Everything else (eval, other devices and dtypes) is the separate operations.
  /// input (B, C) or (B, C, H, W), residual like input -> the same shape.
  torch::Tensor forward_with(const torch::Tensor& input, const BatchNormEpilogue& epilogue);

  /// Chooses when running statistics are updated; drops any accumulated window.
  void set_running_stats_mode(RunningStatsMode mode);
  /// The current RunningStatsMode.
  RunningStatsMode running_stats_mode() const { return options_.running_stats(); }

  /// Applies one running-statistics update with the pooled statistics of the window and starts
  /// a new window. Does nothing when nothing was accumulated (kPerCall, or no training forward).
  void commit_window();
  /// Drops the accumulated statistics (a window that restarts or is skipped).
  void discard_window();
  /// Values per channel accumulated in the current window (B*H*W summed over its forwards).
  int64_t window_count() const { return window_count_; }

  /// Running mean 0, running variance 1, num_batches_tracked 0; drops the window.
  void reset_running_stats();
  /// Weight 1, bias 0 (and reset_running_stats()).
  void reset_parameters();

  /// Prints `bigbatch::nn::BatchNorm(C, eps=..., momentum=..., running_stats=...)`.
  void pretty_print(std::ostream& stream) const override;

  /// The options the layer was built with (running_stats follows set_running_stats_mode).
  const BatchNormOptions& options() const { return options_; }

  /// Per-channel scale (C), a parameter.
  torch::Tensor weight;
  /// Per-channel shift (C), a parameter.
  torch::Tensor bias;
  /// Running mean (C), a buffer.
  torch::Tensor running_mean;
  /// Running (unbiased) variance (C), a buffer.
  torch::Tensor running_var;
  /// Number of running-statistics updates made, an int64 scalar buffer.
  torch::Tensor num_batches_tracked;

 private:
  /// Checks `input` as forward() documents; returns whether this forward records running
  /// statistics (training, not a checkpoint recompute).
  bool check_input(const torch::Tensor& input) const;
  /// Makes `write` (to the running or window statistics) now, or, in a concurrent forward
  /// (nn::in_concurrent_forward()), defers it to be made in micro-batch order.
  void write_statistics(StateWrite write);
  /// Merges the detached statistics of `input` into the window.
  void accumulate_window(const torch::Tensor& input);
  /// Merges one forward's batch mean and sum of squared deviations (C, float64) over `count`
  /// values per channel into the window.
  void merge_into_window(const torch::Tensor& mean, const torch::Tensor& m2, int64_t count);
  /// running = (1 - momentum) running + momentum statistic, in float64, stored in the buffers'
  /// dtype; adds 1 to num_batches_tracked. mean and unbiased_var (C) float64.
  void update_running_statistics(const torch::Tensor& mean, const torch::Tensor& unbiased_var);

  BatchNormOptions options_;
  int64_t window_count_ = 0;   // values per channel in the window
  torch::Tensor window_mean_;  // (C) float64, mean of the window
  torch::Tensor window_m2_;    // (C) float64, sum of squared deviations from window_mean_
};
/// Module holder for BatchNormImpl: `nn::BatchNorm bn(64);`.
TORCH_MODULE(BatchNorm);

/// Every nn::BatchNorm in `module` (itself included), in modules() order.
std::vector<BatchNormImpl*> batch_norms_of(torch::nn::Module& module);
/// Sets the RunningStatsMode of every nn::BatchNorm in `module`.
void set_running_stats_mode(torch::nn::Module& module, RunningStatsMode mode);
/// Calls commit_window() on every nn::BatchNorm in `module` (once per optimizer step).
void commit_window(torch::nn::Module& module);
/// Calls discard_window() on every nn::BatchNorm in `module`.
void discard_window(torch::nn::Module& module);
/// Number of batch-norm layers in `module` (itself included): nn::BatchNorm and LibTorch's
/// torch::nn::BatchNorm1d/2d/3d. LibTorch's layers know nothing of windows or recomputes, so a
/// trainer can warn when a user model has some.
int64_t count_batch_norms(const torch::nn::Module& module);

/// The number of groups NormKind::kGroup uses for `channels` channels: the largest divisor G of
/// C with G <= 32 and C / G >= 2 (at least two channels per group), or 1 when C is 1.
/// Examples: 16 -> 8, 32 -> 16, 64 -> 32, 48 -> 24, 3 -> 1. Throws bigbatch::InputError unless
/// channels > 0.
int64_t group_norm_groups(int64_t channels);

/// A normalisation layer over `channels` channels for (B, C) or (B, C, H, W) inputs:
/// kBatch -> nn::BatchNorm(C); kGroup -> GroupNorm(group_norm_groups(C), C);
/// kLayer -> GroupNorm(1, C); kInstance -> GroupNorm(C, C). Every kind has a per-channel affine
/// `weight` and `bias` and nothing else trainable, so a model has the same parameter count with
/// each kind (BatchNorm's running statistics are buffers). Register it with
/// `register_module(name, norm.ptr())` and call `norm.forward(x)`.
///
/// Converting a model from BatchNorm to another norm cannot be done by swapping its registered
/// submodules, since its forward() calls the member holders it built; build the model again with
/// the other NormKind instead (for example ResNetOptions().norm(NormKind::kGroup)).
/// Throws bigbatch::InputError unless channels > 0.
torch::nn::AnyModule make_norm(NormKind kind, int64_t channels);

/// `norm`'s forward followed by `epilogue` (residual add, then ReLU), for a norm from make_norm():
/// nn::BatchNorm's forward_with() (fused where it can be), the separate operations otherwise.
/// input (B, C[, H, W]) -> the same shape.
torch::Tensor norm_forward(torch::nn::AnyModule& norm, const torch::Tensor& input,
                           const BatchNormEpilogue& epilogue);

}  // namespace bigbatch::nn
