#include "bigbatch/engine/plan.h"

#include <cmath>
#include <cstdio>

#include "bigbatch/core/check.h"

namespace bigbatch::engine {

LrScaling parse_lr_scaling(const std::string& text, const std::string& field) {
  if (text == "none")
    return LrScaling::kNone;
  if (text == "linear")
    return LrScaling::kLinear;
  if (text == "sqrt")
    return LrScaling::kSqrt;
  throw InputError(cat(field, " = \"", text, "\" is not a scaling rule; expected one of \"none\", ",
                       "\"linear\", \"sqrt\""));
}

std::string to_string(LrScaling scaling) {
  switch (scaling) {
    case LrScaling::kNone:
      return "none";
    case LrScaling::kLinear:
      return "linear";
    case LrScaling::kSqrt:
      return "sqrt";
  }
  return "?";
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

double scaled_lr(double base_lr, LrScaling scaling, int64_t global_batch, int64_t base_batch) {
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(base_batch);
  switch (scaling) {
    case LrScaling::kNone:
      return base_lr;
    case LrScaling::kLinear:
      return base_lr * ratio;
    case LrScaling::kSqrt:
      return base_lr * std::sqrt(ratio);
  }
  return base_lr;
}

/// The micro-batch `options` ask for out of a rank's `per_rank` samples (called `batch_name` in
/// errors): the one given, the one its accum_steps imply, or the whole batch.
int64_t micro_batch_of(const BatchOptions& options, int64_t per_rank,
                       const std::string& batch_name) {
  const int64_t micro = options.micro_batch();
  const int64_t accum = options.accum_steps();
  if (micro > 0 && accum > 0) {
    BB_CHECK_INPUT(micro * accum == per_rank, "BatchOptions.micro_batch = ", micro,
                   " times BatchOptions.accum_steps = ", accum, " is ", micro * accum, ", not ",
                   batch_name, "; set only one of the two");
    return micro;
  }
  if (micro > 0)
    return micro;
  if (accum == 0)
    return per_rank;
  const int64_t derived = ceil_div(per_rank, accum);
  BB_CHECK_INPUT(ceil_div(per_rank, derived) == accum, "BatchOptions.accum_steps = ", accum,
                 " cannot split ", batch_name,
                 " into micro-batches of one size plus a smaller last one; set "
                 "BatchOptions.micro_batch instead");
  return derived;
}

}  // namespace

Plan resolve_plan(const BatchOptions& options) {
  const int64_t global = options.global_batch();
  const int64_t world = options.world_size();
  BB_CHECK_INPUT(global > 0, "BatchOptions.global_batch = ", global,
                 " must be a positive sample count");
  BB_CHECK_INPUT(world > 0, "the world size (data-parallel processes) is ", world,
                 "; expected at least 1");
  BB_CHECK_INPUT(global % world == 0, "BatchOptions.global_batch = ", global,
                 " does not split evenly over ", world,
                 " processes; make it a multiple of the world size (global_batch = micro_batch x "
                 "accum_steps x world_size)");
  const int64_t per_rank = global / world;
  // Where a per-rank batch is meant, say so when there are several ranks.
  const std::string batch_name =
      world == 1 ? cat("BatchOptions.global_batch = ", global)
                 : cat("the per-process batch (BatchOptions.global_batch = ", global, " / ", world,
                       " processes = ", per_rank, ")");
  BB_CHECK_INPUT(options.micro_batch() >= 0, "BatchOptions.micro_batch = ", options.micro_batch(),
                 " must be positive (or left unset to derive it from accum_steps)");
  BB_CHECK_INPUT(options.accum_steps() >= 0, "BatchOptions.accum_steps = ", options.accum_steps(),
                 " must be positive (or left unset to derive it from micro_batch)");
  BB_CHECK_INPUT(options.micro_batch() <= per_rank,
                 "BatchOptions.micro_batch = ", options.micro_batch(), " is larger than ",
                 batch_name, "; a micro-batch is a part of it");
  BB_CHECK_INPUT(options.accum_steps() <= per_rank,
                 "BatchOptions.accum_steps = ", options.accum_steps(), " is larger than ",
                 batch_name, "; every micro-batch needs at least one sample");

  Plan plan;
  plan.global_batch = global;
  plan.world_size = world;
  plan.micro_batch = micro_batch_of(options, per_rank, batch_name);
  plan.accum_steps = ceil_div(per_rank, plan.micro_batch);

  plan.base_batch = options.base_batch() == 0 ? global : options.base_batch();
  BB_CHECK_INPUT(plan.base_batch > 0, "BatchOptions.base_batch = ", options.base_batch(),
                 " must be a positive sample count (or 0 for the global batch)");
  BB_CHECK_INPUT(std::isfinite(options.base_lr()) && options.base_lr() > 0,
                 "BatchOptions.base_lr = ", options.base_lr(),
                 " must be a positive, finite learning rate");
  plan.base_lr = options.base_lr();
  plan.lr_scaling = options.lr_scaling();
  plan.lr = scaled_lr(plan.base_lr, plan.lr_scaling, global, plan.base_batch);
  return plan;
}

void Plan::set_micro_batch(int64_t size) {
  BB_CHECK(size >= 1 && size <= rank_batch(), "micro-batch ", size, " outside [1, ", rank_batch(),
           "]");
  micro_batch = size;
  accum_steps = ceil_div(rank_batch(), size);
}

std::vector<int64_t> Plan::split_window(int64_t window_samples) const {
  BB_CHECK(window_samples >= 0 && window_samples <= global_batch, "window of ", window_samples,
           " samples for a global batch of ", global_batch);
  std::vector<int64_t> sizes;
  for (int64_t left = window_samples; left > 0; left -= micro_batch) {
    sizes.push_back(std::min(left, micro_batch));
  }
  return sizes;
}

void Plan::describe(Table& table) const {
  const std::vector<int64_t> sizes = split_window(rank_batch());
  std::string split = cat(sizes.size(), " x ", micro_batch);
  if (sizes.back() != micro_batch) {
    split = cat(sizes.size() - 1, " x ", micro_batch, " + ", sizes.back());
  }
  table.add("global_batch", std::to_string(global_batch), "samples per optimizer step");
  table.add("micro_batch", std::to_string(micro_batch), "samples per forward/backward pass");
  table.add(
      "accum_steps", std::to_string(accum_steps),
      cat("micro-batches per optimizer step", world_size > 1 ? " and process" : "", ": ", split));
  table.add("world_size", std::to_string(world_size),
            world_size == 1
                ? std::string("processes (data parallel)")
                : cat("processes (data parallel): ", global_batch, " = ", micro_batch, " x ",
                      accum_steps, " x ", world_size,
                      split.find('+') != std::string::npos ? " (last micro-batch smaller)" : ""));
  char lr_text[64];
  std::snprintf(lr_text, sizeof(lr_text), "%.4g", lr);
  std::string rule = "base lr " + cat(base_lr) + " at batch " + std::to_string(base_batch);
  if (lr_scaling != LrScaling::kNone)
    rule += ", " + to_string(lr_scaling) + " scaling";
  table.add("lr", lr_text, rule);
}

}  // namespace bigbatch::engine
