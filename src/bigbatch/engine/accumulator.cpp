#include "bigbatch/engine/accumulator.h"

#include <cmath>

#include "bigbatch/core/check.h"
#include "bigbatch/dist/local_communicator.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/embedding.h"

namespace bigbatch::engine {

NonFinitePolicy parse_nonfinite_policy(const std::string& text, const std::string& field) {
  if (text == "skip")
    return NonFinitePolicy::kSkip;
  if (text == "abort")
    return NonFinitePolicy::kAbort;
  throw InputError(cat(field, " = \"", text, "\" is not a policy; expected \"skip\" or \"abort\""));
}

std::string to_string(NonFinitePolicy policy) {
  return policy == NonFinitePolicy::kSkip ? "skip" : "abort";
}

std::string to_string(SkipReason reason) {
  switch (reason) {
    case SkipReason::kNone:
      return "";
    case SkipReason::kNonFiniteLoss:
      return "nonfinite_loss";
    case SkipReason::kNonFiniteGradient:
      return "nonfinite_gradient";
  }
  return "";
}

GradientAccumulator::GradientAccumulator(std::vector<torch::Tensor> parameters,
                                         torch::optim::Optimizer& optimizer,
                                         const LrSchedule* schedule, AccumulatorOptions options)
    : parameters_(std::move(parameters)),
      optimizer_(optimizer),
      schedule_(schedule),
      options_(options),
      communicator_(&dist::single_process()) {
  BB_CHECK_INPUT(options_.max_grad_norm() >= 0,
                 "AccumulatorOptions.max_grad_norm = ", options_.max_grad_norm(),
                 " must be >= 0 (0 disables clipping)");
}

void GradientAccumulator::begin_window(const Counts& window) {
  BB_CHECK(!window_open_, "begin_window() while a window is open; call step() first");
  BB_CHECK(window.samples >= 0 && window.tokens >= 0, "negative window counts: ", window.samples,
           " samples, ", window.tokens, " tokens");
  declared_ = window;
  // A rank whose shard is empty (a short last window) takes part too.
  window_ = sum_over_ranks(window);
  BB_CHECK(window_.samples > 0, "a window needs at least one sample, got ", window_.samples);
  BB_CHECK(window_.units(options_.unit()) > 0, "a window needs at least one counted ",
           options_.unit() == LossUnit::kToken ? "token" : "sample", ", got 0");
  window_open_ = true;
  seen_ = Counts{};
  micro_batches_ = 0;
  loss_sum_ = torch::Tensor();
  window_scale_ = scaler_ != nullptr ? scaler_->scale() : 0.0;
}

void GradientAccumulator::set_data_parallel(dist::Communicator* communicator,
                                            dist::GradientReducer* reducer) {
  BB_CHECK(!window_open_, "set_data_parallel() while a window is open; call it between windows");
  dist::Communicator* ranks = communicator != nullptr ? communicator : &dist::single_process();
  BB_CHECK(reducer != nullptr || ranks->world_size() == 1, "set_data_parallel() over ",
           ranks->world_size(),
           " ranks needs a gradient reducer; without one each rank would step on its own "
           "gradient");
  communicator_ = ranks;
  reducer_ = reducer;
}

void GradientAccumulator::set_loss_scaler(LossScaler* scaler) {
  BB_CHECK(!window_open_, "set_loss_scaler() while a window is open; call it between windows");
  scaler_ = scaler;
}

namespace {

/// A micro-batch's loss sum as the window's total keeps it: () float64, detached. Summed on the
/// loss's device and read once at the boundary: no device sync per micro-batch.
torch::Tensor detached_loss_sum(const torch::Tensor& loss_sum) {
  return loss_sum.detach().to(torch::kFloat64).reshape({});
}

}  // namespace

torch::Tensor GradientAccumulator::loss_for_backward(const torch::Tensor& loss_sum) const {
  BB_CHECK(window_open_,
           "backward() or gradients_of() outside a window; call begin_window() first");
  BB_CHECK(loss_sum.numel() == 1, "loss_sum must be a scalar, got shape ", loss_sum.sizes());
  BB_CHECK(scaler_ == nullptr || scaler_->scale() == window_scale_,
           "the loss scale changed inside a window (from ", window_scale_, " to ", scaler_->scale(),
           "); update the scaler only at the boundary");
  const torch::Tensor loss =
      window_normalised_loss(loss_sum.reshape({}), window_.units(options_.unit()));
  return scaler_ == nullptr ? loss : scaler_->scale_loss(loss);
}

void GradientAccumulator::count(const torch::Tensor& detached_loss_sum, const Counts& micro) {
  seen_ += micro;
  BB_CHECK(seen_.samples <= declared_.samples && seen_.tokens <= declared_.tokens,
           "the micro-batches hold more than the window declared: ", seen_.samples, " samples and ",
           seen_.tokens, " tokens against ", declared_.samples, " and ", declared_.tokens);
  ++micro_batches_;
  loss_sum_ = loss_sum_.defined() ? loss_sum_ + detached_loss_sum : detached_loss_sum;
}

void GradientAccumulator::backward(const torch::Tensor& loss_sum, const Counts& micro) {
  const torch::Tensor loss = loss_for_backward(loss_sum);
  count(detached_loss_sum(loss_sum), micro);
  if (reducer_ != nullptr && seen_ == declared_)
    reducer_->arm();  // this rank's last backward of the window: its buckets start as they fill
  // Into .grad: an embedding whose .grad is already a dense buffer adds only its used rows, and
  // the fused blocks add their bf16 weight gradients to .grad themselves.
  const nn::SparseEmbeddingGradScope sparse(nn::SparseEmbeddingGrad::kIntoDenseGrad);
  const nn::DirectWeightGradScope direct;
  loss.backward();
}

MicroBatchGradients GradientAccumulator::gradients_of(const torch::Tensor& loss_sum,
                                                      const Counts& micro) const {
  const torch::Tensor loss = loss_for_backward(loss_sum);
  std::vector<torch::Tensor> differentiated;
  std::vector<size_t> index_of;  // differentiated[k] is parameters_[index_of[k]]
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (parameters_[i].requires_grad()) {
      differentiated.push_back(parameters_[i]);
      index_of.push_back(i);
    }
  }
  MicroBatchGradients result;
  result.counts = micro;
  result.loss_sum = detached_loss_sum(loss_sum);
  result.gradients.resize(parameters_.size());
  // accumulate() adds an embedding's sparse gradient (its used rows) to the dense .grad, and the
  // fused blocks' bf16 weight gradients, kept, widening them as it adds.
  const nn::SparseEmbeddingGradScope sparse(nn::SparseEmbeddingGrad::kAlways);
  nn::KeptWeightGradScope kept_scope;
  const std::vector<torch::Tensor> gradients =
      torch::autograd::grad({loss}, differentiated, /*grad_outputs=*/{}, /*retain_graph=*/false,
                            /*create_graph=*/false, /*allow_unused=*/true);
  const auto kept = kept_scope.take();
  for (size_t k = 0; k < gradients.size(); ++k) {
    const auto found = kept.find(differentiated[k].unsafeGetTensorImpl());
    torch::Tensor& gradient = result.gradients[index_of[k]];
    if (found == kept.end())
      gradient = gradients[k];
    else if (!gradients[k].defined())
      gradient = found->second;  // bf16
    else                         // a weight used twice: autograd got its other gradients
      gradient = gradients[k] + found->second;
  }
  return result;
}

void GradientAccumulator::accumulate(MicroBatchGradients gradients) {
  BB_CHECK(window_open_, "accumulate() outside a window; call begin_window() first");
  BB_CHECK(gradients.gradients.size() == parameters_.size(), "accumulate() got ",
           gradients.gradients.size(), " gradients for ", parameters_.size(), " parameters");
  count(gradients.loss_sum, gradients.counts);
  const torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const torch::Tensor& gradient = gradients.gradients[i];
    if (!gradient.defined())
      continue;
    torch::Tensor& parameter = parameters_[i];
    // As LibTorch's AccumulateGrad does (nn::add_weight_grad, which widens a kept bf16 gradient
    // as it adds). A sparse first one (an embedding's used rows) is added to zeros: the values
    // a dense gradient of the same rows would copy.
    if (gradient.is_sparse() && !parameter.grad().defined())
      parameter.mutable_grad() = torch::zeros_like(parameter).add_(gradient);
    else
      nn::add_weight_grad(parameter, gradient);
  }
}

WindowResult GradientAccumulator::step() {
  BB_CHECK(window_open_, "step() outside a window; call begin_window() first");
  BB_CHECK(seen_ == declared_, "the window declared ", declared_.samples, " samples and ",
           declared_.tokens, " tokens but its micro-batches held ", seen_.samples, " and ",
           seen_.tokens, "; the loss would be mis-normalised");
  window_open_ = false;

  WindowResult result;
  result.counts = window_;
  result.micro_batches = micro_batches_;
  result.loss_scale = window_scale_;
  // A single process reads the loss, the finite check and the norm in one wait for the device.
  // Data-parallel ranks first agree on whether to step at all (another rank may abandon the
  // window) and sum the gradients; then one read gives the check and norm of the sums.
  const bool alone = communicator_->world_size() == 1 && reducer_ == nullptr;
  BoundaryReading reading = alone ? read_boundary() : BoundaryReading{};
  Agreement agreement =
      agree(false, alone ? std::optional<double>(reading.loss_sum) : std::nullopt);
  result.abandoned_by = std::move(agreement.abandoned_by);
  if (!result.abandoned_by.empty()) {
    free_gradients();
    result.restarted = true;
    result.step = steps_taken_ + 1;
    return result;
  }
  if (!alone)
    reading = read_boundary();
  result.mean_loss = agreement.loss_sum / static_cast<double>(window_.units(options_.unit()));
  const bool abort = options_.on_nonfinite() == NonFinitePolicy::kAbort;
  // 1. Inf/NaN: the loss, then every gradient (with a scaler: unscaled once, checked exactly;
  // an overflow is its backoff, never an abort).
  const bool loss_finite = std::isfinite(result.mean_loss);
  if (!loss_finite && abort)
    abort_nonfinite(SkipReason::kNonFiniteLoss, result.mean_loss);
  if (!loss_finite)
    return skip(result, SkipReason::kNonFiniteLoss);
  if (scaler_ != nullptr && !reading.finite)
    return skip(result, SkipReason::kNonFiniteGradient);
  result.grad_norm = reading.grad_norm;
  // Without a scaler: a finite norm proves finite gradients; only an inf/NaN norm (which a huge
  // but finite gradient can also give) pays for the exact check.
  if (scaler_ == nullptr && !std::isfinite(result.grad_norm) && !gradients_finite(parameters_)) {
    if (abort)
      abort_nonfinite(SkipReason::kNonFiniteGradient, result.mean_loss);
    result.grad_norm = 0.0;
    return skip(result, SkipReason::kNonFiniteGradient);
  }

  // 2. Clip the unscaled window gradient, set the step's lr, step, zero.
  if (options_.max_grad_norm() > 0) {
    result.clipped = clip_gradients(parameters_, result.grad_norm, options_.max_grad_norm());
  }
  if (schedule_ != nullptr)
    set_learning_rate(optimizer_, schedule_->lr_at(steps_taken_));
  result.lr = optimizer_.param_groups().front().options().get_lr();

  optimizer_.step();
  free_gradients();  // until the next window
  if (scaler_ != nullptr)
    scaler_->update(false);
  result.step = ++steps_taken_;
  return result;
}

WindowResult GradientAccumulator::skip(WindowResult result, SkipReason reason) {
  free_gradients();
  result.skipped = true;
  result.skip_reason = reason;
  result.step = steps_taken_ + 1;  // the step it would have been; not taken
  if (scaler_ != nullptr)
    scaler_->update(true);  // backs off; throws at the minimum scale
  return result;
}

void GradientAccumulator::abort_nonfinite(SkipReason reason, double mean_loss) {
  free_gradients();
  if (scaler_ != nullptr)
    scaler_->discard_window();  // unscaled with the boundary's one read; no update
  const int64_t step = steps_taken_ + 1;
  if (reason == SkipReason::kNonFiniteLoss) {
    throw NonFiniteError(
        cat("optimizer step ", step, ": the window's mean loss is ", mean_loss,
            " (AccumulatorOptions.on_nonfinite = \"abort\"); no step was taken. Look for a "
            "learning rate that is too high or bad input data, or set "
            "AccumulatorOptions.on_nonfinite = \"skip\" to drop such windows"),
        step);
  }
  throw NonFiniteError(
      cat("optimizer step ", step, ": the window gradient holds inf or NaN while ",
          "the mean loss is finite (", mean_loss,
          "; AccumulatorOptions.on_nonfinite = \"abort\"); no step was taken. Look for a "
          "learning rate that is too high, or set AccumulatorOptions.on_nonfinite = \"skip\""),
      step);
}

void GradientAccumulator::abort_window() {
  if (!window_open_ && communicator_->world_size() == 1)
    return;
  if (!window_open_)
    sum_over_ranks(Counts{});  // the other ranks counted this window in begin_window
  agree(true);
  window_open_ = false;
  loss_sum_ = torch::Tensor();
  free_gradients();
}

Counts GradientAccumulator::sum_over_ranks(const Counts& local) {
  torch::Tensor counts = torch::tensor({local.samples, local.tokens}, torch::kInt64);  // (2)
  communicator_->all_reduce(counts, dist::Traffic::kControl, "all-reduce of the window counts");
  return Counts{counts[0].item<int64_t>(), counts[1].item<int64_t>()};
}

GradientAccumulator::BoundaryReading GradientAccumulator::read_boundary() {
  const torch::Tensor finite =
      scaler_ != nullptr ? scaler_->unscale(parameters_) : torch::Tensor();  // () bool
  const torch::Tensor norm = gradient_norm_tensor(parameters_);              // ()
  std::vector<torch::Tensor> figures;  // () float64 each, on the device
  const auto add = [&](const torch::Tensor& t) {
    if (t.defined())
      figures.push_back(t.to(torch::kFloat64));
  };
  add(loss_sum_);
  add(finite);
  add(norm);
  BoundaryReading reading;
  if (figures.empty())
    return reading;
  const torch::Tensor read = torch::stack(figures).to(torch::kCPU);  // (<= 3) float64
  const auto values = read.accessor<double, 1>();
  int64_t at = 0;
  reading.loss_sum = loss_sum_.defined() ? values[at++] : 0.0;
  reading.finite = finite.defined() ? values[at++] != 0.0 : true;
  reading.grad_norm = norm.defined() ? values[at++] : 0.0;
  return reading;
}

GradientAccumulator::Agreement GradientAccumulator::agree(bool abandoning,
                                                          std::optional<double> local_loss) {
  if (reducer_ != nullptr) {
    if (abandoning)
      reducer_->abandon();
    else
      reducer_->finish();
  }
  const int64_t world_size = communicator_->world_size();
  // (1 + world_size) float64: the window's loss sum, then 1 for each rank that abandons it.
  torch::Tensor agreement = torch::zeros({1 + world_size}, torch::kFloat64);
  if (!abandoning && local_loss)
    agreement[0] = *local_loss;
  else if (!abandoning && loss_sum_.defined())
    agreement[0] = loss_sum_.to(torch::kCPU);
  if (abandoning)
    agreement[1 + communicator_->rank()] = 1.0;
  communicator_->all_reduce(agreement, dist::Traffic::kControl,
                            "all-reduce of the window's loss and agreement");
  Agreement agreed;
  agreed.loss_sum = agreement[0].item<double>();
  for (int64_t rank = 0; rank < world_size; ++rank) {
    if (agreement[1 + rank].item<double>() > 0)
      agreed.abandoned_by.push_back(rank);
  }
  return agreed;
}

void GradientAccumulator::free_gradients() {
  for (torch::Tensor& parameter : parameters_) {
    if (parameter.grad().defined())
      parameter.mutable_grad().reset();
  }
}

torch::Tensor gradient_norm_tensor(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> norms;
  for (const torch::Tensor& parameter : parameters) {
    if (parameter.grad().defined())
      norms.push_back(parameter.grad().detach().norm(2));
  }
  return norms.empty() ? torch::Tensor() : torch::stack(norms).norm(2);
}

double gradient_norm(const std::vector<torch::Tensor>& parameters) {
  const torch::Tensor norm = gradient_norm_tensor(parameters);
  return norm.defined() ? norm.item<double>() : 0.0;
}

bool clip_gradients(const std::vector<torch::Tensor>& parameters, double norm, double max_norm) {
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient >= 1.0)
    return false;
  for (const torch::Tensor& parameter : parameters) {
    if (parameter.grad().defined())
      parameter.grad().detach().mul_(coefficient);
  }
  return true;
}

}  // namespace bigbatch::engine
