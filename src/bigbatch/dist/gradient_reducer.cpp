#include "bigbatch/dist/gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"

namespace bigbatch::dist {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Length of the union of [start, end) intervals, and of its part before `cut`.
std::pair<double, double> union_length(std::vector<std::pair<double, double>> intervals,
                                       double cut) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0.0;
  double before_cut = 0.0;
  double start = 0.0;
  double end = -1.0;
  auto close = [&] {
    if (end > start) {
      total += end - start;
      before_cut += std::max(0.0, std::min(end, cut) - start);
    }
  };
  for (const auto& [from, to] : intervals) {
    if (from > end) {
      close();
      start = from;
      end = to;
    } else {
      end = std::max(end, to);
    }
  }
  close();
  return {total, before_cut};
}

}  // namespace

/// Tells the reducer when a parameter's gradient accumulator has run.
class GradientReducer::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradientReducer& reducer, int64_t parameter)
      : reducer_(reducer), parameter_(parameter) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    reducer_.on_gradient_ready(parameter_);
    return outputs;
  }

 private:
  GradientReducer& reducer_;
  int64_t parameter_;
};

GradientReducer::GradientReducer(Communicator& communicator, std::vector<torch::Tensor> parameters,
                                 ReducerOptions options)
    : communicator_(communicator) {
  BB_CHECK_INPUT(options.bucket_bytes() > 0, "dist.bucket_mb must be positive, got ",
                 options.bucket_bytes(), " bytes");
  for (torch::Tensor& parameter : parameters) {
    if (parameter.requires_grad())
      parameters_.push_back(std::move(parameter));
  }
  const int64_t count = static_cast<int64_t>(parameters_.size());
  bucket_of_.assign(count, -1);
  slot_of_.assign(count, -1);
  filled_.assign(count, false);
  // Reverse registration order: backward reaches the last layers first.
  std::vector<std::vector<int64_t>> groups;
  int64_t group_bytes = 0;
  for (int64_t i = count - 1; i >= 0; --i) {
    const torch::Tensor& parameter = parameters_[i];
    const int64_t bytes = parameter.numel() * static_cast<int64_t>(parameter.element_size());
    const bool same_dtype = !groups.empty() && parameters_[groups.back().front()].scalar_type() ==
                                                   parameter.scalar_type();
    if (groups.empty() || !same_dtype || group_bytes + bytes > options.bucket_bytes()) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(i);
    group_bytes += bytes;
  }
  for (const std::vector<int64_t>& group : groups) {
    Bucket bucket;
    int64_t numel = 0;
    for (const int64_t i : group) {
      bucket_of_[i] = static_cast<int64_t>(buckets_.size());
      slot_of_[i] = static_cast<int64_t>(bucket.parameters.size());
      bucket.parameters.push_back(i);
      bucket.offsets.push_back(numel);
      numel += parameters_[i].numel();
    }
    bucket.flat = torch::zeros({numel + static_cast<int64_t>(group.size())},
                               parameters_[group.front()].options().requires_grad(false));
    buckets_.push_back(std::move(bucket));
  }
  for (int64_t i = 0; i < count; ++i) {
    accumulators_.push_back(torch::autograd::impl::grad_accumulator(parameters_[i]));
    BB_CHECK(accumulators_.back() != nullptr, "parameter ", i, " has no gradient accumulator");
    hook_keys_.push_back(
        accumulators_.back()->add_post_hook(std::make_unique<ReadyHook>(*this, i)));
  }
  reset();
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i)
    accumulators_[i]->del_post_hook(hook_keys_[i]);
}

int64_t GradientReducer::bytes_per_window() const {
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_)
    bytes += bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size());
  return bytes;
}

void GradientReducer::reset() {
  armed_ = false;
  next_launch_ = 0;
  std::fill(filled_.begin(), filled_.end(), false);
  for (Bucket& bucket : buckets_) {
    bucket.waiting = static_cast<int64_t>(bucket.parameters.size());
    bucket.work.reset();
  }
}

void GradientReducer::arm() {
  BB_CHECK(!armed_, "arm() twice in one window; call finish() or abandon() first");
  armed_ = true;
}

void GradientReducer::on_gradient_ready(int64_t parameter) {
  if (!armed_ || filled_[parameter])
    return;
  fill(parameter);
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  if (--bucket.waiting == 0)
    launch_ready();
}

void GradientReducer::fill(int64_t parameter) {
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  const int64_t slot = slot_of_[parameter];
  const torch::Tensor& grad = parameters_[parameter].grad();
  const int64_t numel = parameters_[parameter].numel();
  const int64_t flags_at = bucket.flat.numel() - static_cast<int64_t>(bucket.parameters.size());
  const torch::NoGradGuard no_grad;
  torch::Tensor slice = bucket.flat.narrow(0, bucket.offsets[slot], numel);
  if (grad.defined())
    slice.copy_(grad.detach().reshape({-1}));
  else
    slice.zero_();
  bucket.flat[flags_at + slot].fill_(grad.defined() ? 1 : 0);
  filled_[parameter] = true;
}

void GradientReducer::launch_ready() {
  while (next_launch_ < bucket_count() && buckets_[next_launch_].waiting == 0) {
    launch(buckets_[next_launch_], next_launch_);
    ++next_launch_;
  }
}

void GradientReducer::launch(Bucket& bucket, int64_t index) {
  bucket.started_at = now_seconds();
  bucket.work = communicator_.start_all_reduce(
      bucket.flat, Traffic::kGradients,
      cat("all-reduce of gradient bucket ", index + 1, " of ", bucket_count(), " (",
          format_bytes(bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size())),
          ")"));
}

void GradientReducer::complete_all() {
  finish_called_at_ = now_seconds();
  last_window_ = ReductionStats();
  last_window_.early_buckets = next_launch_;
  // Parameters the last backward did not reach (or every one, on a rank without micro-batches)
  // go in as they are now; buckets still start strictly in order on every rank.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!filled_[i])
      fill(static_cast<int64_t>(i));
  }
  for (Bucket& bucket : buckets_)
    bucket.waiting = 0;
  launch_ready();
  std::vector<std::pair<double, double>> intervals;
  for (Bucket& bucket : buckets_) {
    bucket.work->wait();
    intervals.emplace_back(bucket.started_at, bucket.work->finished_at());
    ++last_window_.calls;
    last_window_.bytes += bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size());
  }
  const double waited = now_seconds() - finish_called_at_;
  const auto [busy, hidden] = union_length(intervals, finish_called_at_);
  last_window_.busy_seconds = busy;
  last_window_.hidden_seconds = hidden;
  last_window_.exposed_seconds = waited;
}

void GradientReducer::finish() {
  complete_all();
  const torch::NoGradGuard no_grad;
  // (parameters) float64 on the CPU: how many ranks had a gradient for each parameter, bucket
  // after bucket; one read for the whole window.
  std::vector<torch::Tensor> flags;
  for (const Bucket& bucket : buckets_) {
    const int64_t parameters = static_cast<int64_t>(bucket.parameters.size());
    flags.push_back(
        bucket.flat.narrow(0, bucket.flat.numel() - parameters, parameters).to(torch::kFloat64));
  }
  const torch::Tensor ranks_with_gradient =
      flags.empty() ? torch::Tensor() : torch::cat(flags).to(torch::kCPU);
  const double* had = flags.empty() ? nullptr : ranks_with_gradient.data_ptr<double>();
  for (const Bucket& bucket : buckets_) {
    for (size_t slot = 0; slot < bucket.parameters.size(); ++slot, ++had) {
      torch::Tensor& parameter = parameters_[bucket.parameters[slot]];
      if (*had == 0.0) {
        parameter.mutable_grad().reset();  // no rank had a gradient for it
        continue;
      }
      const torch::Tensor sum =
          bucket.flat.narrow(0, bucket.offsets[slot], parameter.numel()).view_as(parameter);
      if (parameter.grad().defined())
        parameter.mutable_grad().copy_(sum);
      else
        parameter.mutable_grad() = sum.clone();
    }
  }
  reset();
}

void GradientReducer::abandon() {
  complete_all();
  reset();
}

}  // namespace bigbatch::dist
