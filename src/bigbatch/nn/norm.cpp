#include "bigbatch/nn/norm.h"

#include <algorithm>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/concurrent_forward.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::nn {

NormKind parse_norm_kind(const std::string& text, const std::string& field) {
  for (const NormKind kind :
       {NormKind::kBatch, NormKind::kGroup, NormKind::kLayer, NormKind::kInstance}) {
    if (text == to_string(kind))
      return kind;
  }
  throw InputError(cat(field, " must be one of batch|group|layer|instance, got \"", text, "\""));
}

std::string to_string(NormKind kind) {
  switch (kind) {
    case NormKind::kBatch:
      return "batch";
    case NormKind::kGroup:
      return "group";
    case NormKind::kLayer:
      return "layer";
    case NormKind::kInstance:
      return "instance";
  }
  return "?";
}

RunningStatsMode parse_running_stats_mode(const std::string& text, const std::string& field) {
  for (const RunningStatsMode mode : {RunningStatsMode::kPerCall, RunningStatsMode::kPerWindow}) {
    if (text == to_string(mode))
      return mode;
  }
  throw InputError(cat(field, " must be one of per_call|per_window, got \"", text, "\""));
}

std::string to_string(RunningStatsMode mode) {
  switch (mode) {
    case RunningStatsMode::kPerCall:
      return "per_call";
    case RunningStatsMode::kPerWindow:
      return "per_window";
  }
  return "?";
}

namespace {

/// `normalized` (B, C[, H, W]) followed by the epilogue's add and ReLU as separate operations.
torch::Tensor with_epilogue(torch::Tensor normalized, const BatchNormEpilogue& epilogue) {
  if (epilogue.residual.defined())
    normalized = normalized + epilogue.residual;
  return epilogue.relu ? torch::relu(normalized) : normalized;
}

}  // namespace

BatchNormOptions::BatchNormOptions(int64_t num_features) : num_features_(num_features) {}

void validate(const BatchNormOptions& options) {
  BB_CHECK_INPUT(options.num_features() > 0, "BatchNormOptions.num_features must be positive, got ",
                 options.num_features());
  BB_CHECK_INPUT(options.eps() > 0.0, "BatchNormOptions.eps must be positive, got ", options.eps());
  BB_CHECK_INPUT(options.momentum() >= 0.0 && options.momentum() <= 1.0,
                 "BatchNormOptions.momentum must be in [0, 1], got ", options.momentum());
}

BatchNormImpl::BatchNormImpl(BatchNormOptions options) : options_(std::move(options)) {
  validate(options_);
  const int64_t channels = options_.num_features();
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

bool BatchNormImpl::check_input(const torch::Tensor& input) const {
  BB_CHECK_INPUT(input.dim() == 2 || input.dim() == 4,
                 "BatchNorm expects input of shape (B, C) or (B, C, H, W) but got ", input.sizes());
  BB_CHECK_INPUT(input.size(1) == options_.num_features(), "BatchNorm over ",
                 options_.num_features(), " channels (BatchNormOptions.num_features) got input ",
                 input.sizes(), " with ", input.size(1), " channels");
  if (is_training()) {
    BB_CHECK_INPUT(input.numel() > input.size(1),
                   "BatchNorm in training needs more than one value per channel, got input ",
                   input.sizes());
  }
  // Running statistics change only in a training forward that is not a checkpoint recompute.
  return is_training() && !is_recomputing();
}

void BatchNormImpl::write_statistics(StateWrite write) {
  if (in_concurrent_forward())
    defer_state_write(std::move(write));  // made after the pass, in micro-batch order
  else
    write();
}

torch::Tensor BatchNormImpl::forward(const torch::Tensor& input) {
  const bool record = check_input(input);
  const bool training = is_training();
  const bool per_call = record && options_.running_stats() == RunningStatsMode::kPerCall;
  // ATen's kernel writes the running statistics itself, during the forward: no deferring that.
  BB_CHECK_INPUT(!per_call || !in_concurrent_forward(),
                 "BatchNorm in training mode writes its running statistics in every forward, and "
                 "with several micro-batches at once it can put those writes in micro-batch order "
                 "only on its fused kernel (CPU float32 or bfloat16 input, (B, C) or channels-last "
                 "(B, C, H, W)) or with per-window statistics (model.norm_policy = \"ghost\"); "
                 "this input is ",
                 input.scalar_type(), " on ", input.device(), " of shape ", input.sizes(),
                 ". Run one micro-batch at a time (TrainerOptions.concurrent_micro_batches = 1)");
  if (record && options_.running_stats() == RunningStatsMode::kPerWindow)
    accumulate_window(input);
  // Passing no running statistics makes a training forward leave them alone; its output is the
  // same, since training normalises with the batch statistics either way.
  const bool use_running = per_call || !training;
  torch::Tensor output = torch::batch_norm(
      input, weight, bias, use_running ? running_mean : torch::Tensor(),
      use_running ? running_var : torch::Tensor(), training, options_.momentum(), options_.eps(),
      at::globalContext().userEnabledCuDNN());  // (B, C[, H, W])
  if (per_call) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return output;
}

torch::Tensor BatchNormImpl::forward_with(const torch::Tensor& input,
                                          const BatchNormEpilogue& epilogue) {
  if (!is_training() || !options_.fused() ||
      !fused_batch_norm_supported(input, weight, bias, epilogue)) {
    return with_epilogue(forward(input), epilogue);
  }
  const bool record = check_input(input);
  FusedBatchNorm fused =
      fused_batch_norm_train(input, weight, bias, options_.eps(), epilogue);  // (B, C[, H, W])
  if (record && options_.running_stats() == RunningStatsMode::kPerWindow) {
    write_statistics([this, mean = fused.mean, m2 = fused.m2, count = fused.count] {
      merge_into_window(mean, m2, count);
    });
  }
  if (record && options_.running_stats() == RunningStatsMode::kPerCall) {
    write_statistics([this, mean = fused.mean, var = fused.m2 / double(fused.count - 1)] {
      update_running_statistics(mean, var);
    });
  }
  return fused.output;
}

void BatchNormImpl::accumulate_window(const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  torch::Tensor values = input.detach();  // (B, C[, H, W])
  if (values.scalar_type() != torch::kFloat64 && values.scalar_type() != torch::kFloat32)
    values = values.to(torch::kFloat32);  // reduced precision (autocast): reduce in float32
  const std::vector<int64_t> dims =
      input.dim() == 4 ? std::vector<int64_t>{0, 2, 3} : std::vector<int64_t>{0};
  // Two passes (mean, then squared deviations): about 3x faster on CPU than var_mean's scalar
  // Welford reduction, and without the cancellation of a plain sum of squares.
  const torch::Tensor mean = values.mean(dims, /*keepdim=*/true);  // (1, C[, 1, 1])
  const torch::Tensor m2 = (values - mean).square().sum(dims);     // (C)
  write_statistics([this, mean = mean.flatten().to(torch::kFloat64), m2 = m2.to(torch::kFloat64),
                    count = input.numel() / input.size(1)] { merge_into_window(mean, m2, count); });
}

void BatchNormImpl::merge_into_window(const torch::Tensor& batch_mean,
                                      const torch::Tensor& batch_m2, int64_t count) {
  torch::NoGradGuard no_grad;
  if (window_count_ == 0) {
    window_mean_ = batch_mean;
    window_m2_ = batch_m2;
    window_count_ = count;
    return;
  }
  // Chan, Golub and LeVeque's pairwise update of (count, mean, M2).
  const double total = double(window_count_ + count);
  const torch::Tensor delta = batch_mean - window_mean_;  // (C)
  window_mean_ = window_mean_ + delta * (double(count) / total);
  window_m2_ = window_m2_ + batch_m2 + delta.square() * (double(window_count_) * count / total);
  window_count_ += count;
}

void BatchNormImpl::commit_window() {
  if (window_count_ == 0)
    return;
  update_running_statistics(window_mean_, window_m2_ / double(window_count_ - 1));
  discard_window();
}

void BatchNormImpl::update_running_statistics(const torch::Tensor& mean,
                                              const torch::Tensor& unbiased_var) {
  torch::NoGradGuard no_grad;
  const double momentum = options_.momentum();
  // As LibTorch's kernel: the update is computed in double and stored in the buffer's dtype.
  running_mean.copy_(running_mean.to(torch::kFloat64) * (1.0 - momentum) +
                     mean.to(running_mean.device()) * momentum);
  running_var.copy_(running_var.to(torch::kFloat64) * (1.0 - momentum) +
                    unbiased_var.to(running_var.device()) * momentum);
  num_batches_tracked.add_(1);
}

void BatchNormImpl::discard_window() {
  window_count_ = 0;
  window_mean_ = torch::Tensor();
  window_m2_ = torch::Tensor();
}

void BatchNormImpl::set_running_stats_mode(RunningStatsMode mode) {
  options_.running_stats(mode);
  discard_window();
}

void BatchNormImpl::reset_running_stats() {
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
  discard_window();
}

void BatchNormImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  weight.fill_(1.0);
  bias.zero_();
  reset_running_stats();
}

void BatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "bigbatch::nn::BatchNorm(" << options_.num_features() << ", eps=" << options_.eps()
         << ", momentum=" << options_.momentum()
         << ", running_stats=" << to_string(options_.running_stats())
         << (options_.fused() ? "" : ", fused=false") << ")";
}

std::vector<BatchNormImpl*> batch_norms_of(torch::nn::Module& module) {
  std::vector<BatchNormImpl*> found;
  if (auto* self = dynamic_cast<BatchNormImpl*>(&module))
    found.push_back(self);
  for (const auto& child : module.modules(/*include_self=*/false)) {
    if (auto* norm = child->as<BatchNormImpl>())
      found.push_back(norm);
  }
  return found;
}

void set_running_stats_mode(torch::nn::Module& module, RunningStatsMode mode) {
  for (BatchNormImpl* norm : batch_norms_of(module))
    norm->set_running_stats_mode(mode);
}

void commit_window(torch::nn::Module& module) {
  for (BatchNormImpl* norm : batch_norms_of(module))
    norm->commit_window();
}

void discard_window(torch::nn::Module& module) {
  for (BatchNormImpl* norm : batch_norms_of(module))
    norm->discard_window();
}

namespace {

bool is_batch_norm(const torch::nn::Module& module) {
  return dynamic_cast<const BatchNormImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module) != nullptr;
}

}  // namespace

int64_t count_batch_norms(const torch::nn::Module& module) {
  int64_t count = is_batch_norm(module) ? 1 : 0;
  for (const auto& child : module.modules(/*include_self=*/false))
    count += is_batch_norm(*child) ? 1 : 0;
  return count;
}

int64_t group_norm_groups(int64_t channels) {
  BB_CHECK_INPUT(channels > 0, "group_norm_groups: channels must be positive, got ", channels);
  for (int64_t groups = std::min<int64_t>(32, channels / 2); groups > 1; --groups) {
    if (channels % groups == 0)
      return groups;
  }
  return 1;
}

torch::nn::AnyModule make_norm(NormKind kind, int64_t channels) {
  BB_CHECK_INPUT(channels > 0, "make_norm: channels must be positive, got ", channels);
  const auto group_norm = [channels](int64_t groups) {
    return torch::nn::AnyModule(
        torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).affine(true)));
  };
  switch (kind) {
    case NormKind::kBatch:
      return torch::nn::AnyModule(BatchNorm(channels));
    case NormKind::kGroup:
      return group_norm(group_norm_groups(channels));
    case NormKind::kLayer:
      return group_norm(1);
    case NormKind::kInstance:
      return group_norm(channels);
  }
  throw InputError(cat("make_norm: unknown NormKind ", int(kind)));
}

torch::Tensor norm_forward(torch::nn::AnyModule& norm, const torch::Tensor& input,
                           const BatchNormEpilogue& epilogue) {
  if (auto* batch_norm = dynamic_cast<BatchNormImpl*>(norm.ptr().get()))
    return batch_norm->forward_with(input, epilogue);
  return with_epilogue(norm.forward(input), epilogue);
}

}  // namespace bigbatch::nn
