#include "bigbatch/engine/loss_scaler.h"

#include <cmath>

#include "bigbatch/core/check.h"

namespace bigbatch::engine {

void check_loss_scaler_options(const LossScalerOptions& options) {
  BB_CHECK_INPUT(options.growth_factor() > 1.0,
                 "LossScalerOptions.growth_factor = ", options.growth_factor(), " must be > 1");
  BB_CHECK_INPUT(options.backoff_factor() > 0.0 && options.backoff_factor() < 1.0,
                 "LossScalerOptions.backoff_factor = ", options.backoff_factor(),
                 " must be between 0 and 1 (exclusive)");
  BB_CHECK_INPUT(options.min_scale() > 0.0 && std::isfinite(options.min_scale()),
                 "LossScalerOptions.min_scale = ", options.min_scale(),
                 " must be positive and finite");
  BB_CHECK_INPUT(options.init_scale() >= options.min_scale() && std::isfinite(options.init_scale()),
                 "LossScalerOptions.init_scale = ", options.init_scale(),
                 " must be finite and >= LossScalerOptions.min_scale = ", options.min_scale());
  BB_CHECK_INPUT(options.growth_interval() >= 1,
                 "LossScalerOptions.growth_interval = ", options.growth_interval(),
                 " must be >= 1");
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  check_loss_scaler_options(options_);
  state_.scale = options_.init_scale();
}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  // As PyTorch's float32 scale tensor does: a half or bfloat16 loss is scaled in float32, so the
  // scaled loss itself cannot overflow; gradients go back to the model's precision in backward.
  const bool reduced = loss.scalar_type() == torch::kHalf || loss.scalar_type() == torch::kBFloat16;
  return (reduced ? loss.to(torch::kFloat32) : loss) * state_.scale;
}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& parameters) {
  const torch::Tensor finite = unscale(parameters);
  return finite.defined() && !finite.item<bool>();
}

torch::Tensor LossScaler::unscale(const std::vector<torch::Tensor>& parameters) {
  BB_CHECK(!unscaled_,
           "unscale_and_check() called twice in one window; unscale once per window, at the "
           "boundary after the last micro-batch, then call update() once");
  unscaled_ = true;
  const double inverse = 1.0 / state_.scale;
  for (const torch::Tensor& parameter : parameters) {
    if (parameter.grad().defined())
      parameter.grad().detach().mul_(inverse);
  }
  return gradients_finite_tensor(parameters);
}

void LossScaler::update(bool found_nonfinite) {
  BB_CHECK(unscaled_,
           "update() without unscale_and_check() in this window; per window: scale every "
           "micro-batch loss, then unscale_and_check() once and update() once at the boundary");
  unscaled_ = false;
  if (found_nonfinite) {
    ++state_.skipped_windows;
    state_.clean_windows = 0;
    if (state_.scale <= options_.min_scale()) {
      throw std::runtime_error(
          cat("loss scale reached its minimum (", state_.scale,
              " = LossScalerOptions.min_scale) and the ", "window still had non-finite gradients (",
              state_.skipped_windows,
              " windows skipped in total): the loss or gradients are inf/NaN at any scale; "
              "likely causes are a learning rate that is too high, bad input data, or values "
              "that overflow the training precision in the forward pass"));
    }
    state_.scale = std::max(state_.scale * options_.backoff_factor(), options_.min_scale());
    return;
  }
  if (++state_.clean_windows < options_.growth_interval())
    return;
  state_.clean_windows = 0;
  const double grown = state_.scale * options_.growth_factor();
  if (std::isfinite(grown))  // as PyTorch: the scale never becomes inf
    state_.scale = grown;
}

void LossScaler::load_state(const LossScalerState& state) {
  BB_CHECK(!unscaled_, "load_state() between unscale_and_check() and update()");
  BB_CHECK_INPUT(state.scale >= options_.min_scale() && std::isfinite(state.scale),
                 "loss scaler state: scale = ", state.scale,
                 " must be finite and >= LossScalerOptions.min_scale = ", options_.min_scale());
  BB_CHECK_INPUT(state.clean_windows >= 0 && state.skipped_windows >= 0,
                 "loss scaler state: clean_windows = ", state.clean_windows,
                 " and skipped_windows = ", state.skipped_windows, " must be >= 0");
  state_ = state;
}

torch::Tensor gradients_finite_tensor(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> finite;  // () bool per gradient
  for (const torch::Tensor& parameter : parameters) {
    if (parameter.grad().defined())
      finite.push_back(torch::isfinite(parameter.grad().detach()).all());
  }
  return finite.empty() ? torch::Tensor() : torch::stack(finite).all();
}

bool gradients_finite(const std::vector<torch::Tensor>& parameters) {
  const torch::Tensor finite = gradients_finite_tensor(parameters);
  return !finite.defined() || finite.item<bool>();
}

}  // namespace bigbatch::engine
