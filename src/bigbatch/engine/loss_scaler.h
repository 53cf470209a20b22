// Dynamic loss scaling for a whole accumulation window: one scale, one unscale, one update.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace bigbatch::engine {

/// Loss scaler settings (PyTorch's GradScaler defaults).
struct LossScalerOptions {
  /// The scale of the first window. With accumulation the window gradient is a sum of
  /// micro-batch gradients, each 1/accum_steps of it, so a higher start (2^16..2^24) is common.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// The scale is multiplied by this (> 1) after `growth_interval` consecutive clean windows.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// The scale is multiplied by this (between 0 and 1) after a window with a non-finite gradient.
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Consecutive clean (finite) windows before the scale grows (>= 1).
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// The scale never backs off below this (> 0); an overflow at this scale is an error.
  TORCH_ARG(double, min_scale) = 1.0;
};

/// Throws InputError naming the config key (`loss_scale.<field>`) and the value of the first
/// option out of range: growth_factor > 1, 0 < backoff_factor < 1, init_scale >= min_scale > 0,
/// growth_interval >= 1.
void check_loss_scaler_options(const LossScalerOptions& options);

/// What a checkpoint keeps of a loss scaler.
struct LossScalerState {
  double scale = 65536.0;       ///< the scale the next window uses
  int64_t clean_windows = 0;    ///< consecutive clean windows since the last growth or overflow
  int64_t skipped_windows = 0;  ///< windows reported non-finite so far, in total
};

/// A dynamic loss scaler for gradient accumulation. The loss of every micro-batch of a window is
/// multiplied by the same scale; at the window boundary the gradients are unscaled once and
/// checked for inf/NaN once, and the scale is updated once: backed off after an overflow (the
/// window must then be skipped), grown after `growth_interval` clean windows. Unscaling or
/// updating per micro-batch is the classic bug (Swin-Transformer #311, accelerate #641); this
/// class refuses it. Usable on its own in any LibTorch loop:
///
///   LossScaler scaler(LossScalerOptions().init_scale(1 << 20));
///   for (auto& window : windows) {
///     for (auto& micro : window)
///       scaler.scale_loss(loss_of(micro) / window_size).backward();
///     const bool overflow = scaler.unscale_and_check(model->parameters());  // once
///     if (!overflow) {
///       torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);  // unscaled gradients
///       optimizer.step();
///     }
///     optimizer.zero_grad();
///     scaler.update(overflow);                                          // once
///   }
///
/// GradientAccumulator::set_loss_scaler does all of this at its boundary.
class LossScaler {
 public:
  /// Throws InputError for options out of range (see check_loss_scaler_options).
  explicit LossScaler(LossScalerOptions options = {});

  /// The scale of the current window.
  double scale() const { return state_.scale; }
  /// `loss` times the current scale, to call backward on; computed in float32 for a half or
  /// bfloat16 loss (so 65536 x a loss above 1 is not already inf in half), else in its dtype.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Once per window, at the boundary: multiplies every defined gradient of `parameters` by
  /// 1/scale in place and returns whether any of them holds inf or NaN (an exact per-element
  /// check, not a norm, which could itself overflow). Throws std::logic_error when called twice
  /// before update().
  bool unscale_and_check(const std::vector<torch::Tensor>& parameters);
  /// unscale_and_check without reading the answer: returns it as a () bool tensor, true when
  /// every gradient is finite, on the gradients' device (queued there; nothing waits for it).
  torch::Tensor unscale(const std::vector<torch::Tensor>& parameters);
  /// Once per window, after unscale_and_check: `found_nonfinite` backs the scale off (not below
  /// min_scale) and restarts the clean-window count; otherwise the count grows and the scale is
  /// multiplied by growth_factor when it reaches growth_interval. Throws std::logic_error when
  /// unscale_and_check was not called for this window, and std::runtime_error when a non-finite
  /// window arrives with the scale already at min_scale.
  void update(bool found_nonfinite);
  /// The window's gradients are dropped without an update (a run stopping on a non-finite
  /// loss): forgets that they were unscaled, and leaves the scale as it is.
  void discard_window() { unscaled_ = false; }

  /// The state to save in a checkpoint.
  const LossScalerState& state() const { return state_; }
  /// Restores a saved state (between windows). Throws InputError for a scale below min_scale or
  /// negative counts.
  void load_state(const LossScalerState& state);
  /// The options in use.
  const LossScalerOptions& options() const { return options_; }

 private:
  LossScalerOptions options_;
  LossScalerState state_;
  bool unscaled_ = false;  // unscale_and_check() called, update() not yet
};

/// Whether every defined gradient of `parameters` is finite: an exact per-element check with one
/// device synchronisation for all of them.
bool gradients_finite(const std::vector<torch::Tensor>& parameters);

/// gradients_finite as a () bool tensor on the gradients' device, without the synchronisation;
/// an undefined tensor when no parameter has a gradient.
torch::Tensor gradients_finite_tensor(const std::vector<torch::Tensor>& parameters);

}  // namespace bigbatch::engine
