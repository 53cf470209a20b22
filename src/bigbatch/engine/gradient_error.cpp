#include "bigbatch/engine/gradient_error.h"

#include "bigbatch/core/check.h"
#include "bigbatch/engine/accumulator.h"

namespace bigbatch::engine {
namespace {

void reset_gradients(torch::nn::Module& model) {
  for (torch::Tensor& parameter : model.parameters())
    parameter.mutable_grad().reset();
}

/// Every parameter's gradient flattened into one float64 vector (zeros where none).
torch::Tensor flat_gradient(torch::nn::Module& model) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& parameter : model.parameters()) {
    const torch::Tensor grad = parameter.grad();
    parts.push_back(grad.defined() ? grad.reshape({-1}).to(torch::kFloat64)
                                   : torch::zeros({parameter.numel()}, torch::kFloat64));
  }
  return torch::cat(parts);
}

/// Leaves the model float32, without gradients and in its previous mode, however the
/// measurement ends.
class RestoreModel {
 public:
  explicit RestoreModel(torch::nn::Module& model) : model_(model), was_(model.is_training()) {}
  ~RestoreModel() {
    reset_gradients(model_);
    model_.to(torch::kFloat32);
    model_.train(was_);
  }
  RestoreModel(const RestoreModel&) = delete;
  RestoreModel& operator=(const RestoreModel&) = delete;

 private:
  torch::nn::Module& model_;
  bool was_;
};

/// The window gradient accumulated over `accum_steps` equal micro-batches in `precision`.
torch::Tensor accumulated_gradient(torch::nn::Module& model, Objective& objective,
                                   const data::Batch& window, int64_t accum_steps,
                                   nn::Precision precision) {
  reset_gradients(model);
  const int64_t units = objective.count(window).units(objective.unit());
  const int64_t micro_batch = window.size() / accum_steps;
  for (int64_t k = 0; k < accum_steps; ++k) {
    data::Batch part{window.inputs.narrow(0, k * micro_batch, micro_batch),
                     window.targets.narrow(0, k * micro_batch, micro_batch)};
    torch::Tensor loss;
    {
      nn::AutocastGuard autocast(precision, torch::kCPU);
      loss = objective.loss_sum(part);
    }
    window_normalised_loss(loss.to(torch::kFloat), units).backward();
  }
  torch::Tensor gradient = flat_gradient(model);
  reset_gradients(model);
  return gradient;
}

}  // namespace

std::vector<GradientError> window_gradient_errors(torch::nn::Module& model, Objective& objective,
                                                  const data::Batch& window,
                                                  const GradientErrorOptions& options) {
  for (const int64_t steps : options.accum_steps()) {
    BB_CHECK_INPUT(steps >= 1 && window.size() % steps == 0, "accum_steps ", steps,
                   " must divide the window of ", window.size(), " samples");
  }
  for (const nn::Precision precision : options.precisions())
    nn::check_precision_supported(precision, torch::kCPU, "precision");
  for (const torch::Tensor& parameter : model.parameters()) {
    BB_CHECK(parameter.scalar_type() == torch::kFloat,
             "window_gradient_errors needs a float32 "
             "model, got a parameter of ",
             parameter.scalar_type());
  }
  const RestoreModel restore(model);
  model.eval();
  reset_gradients(model);

  // The reference: float64 weights, one pass over the whole window, no autocast.
  model.to(torch::kFloat64);
  const int64_t units = objective.count(window).units(objective.unit());
  window_normalised_loss(objective.loss_sum(window), units).backward();
  const torch::Tensor reference = flat_gradient(model);
  const double reference_norm = reference.norm().item<double>();
  reset_gradients(model);
  model.to(torch::kFloat32);  // exact: these weights were float32 a moment ago

  std::vector<GradientError> errors;
  for (const nn::Precision precision : options.precisions()) {
    for (const int64_t steps : options.accum_steps()) {
      const torch::Tensor gradient =
          accumulated_gradient(model, objective, window, steps, precision);
      GradientError error;
      error.precision = precision;
      error.accum_steps = steps;
      error.micro_batch = window.size() / steps;
      error.relative_error = (gradient - reference).norm().item<double>() / reference_norm;
      errors.push_back(error);
    }
  }
  return errors;
}

}  // namespace bigbatch::engine
