#include "bigbatch/nn/recompute.h"

#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <charconv>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Carries the block, the random state and the autocast settings of its forward from forward to
/// backward through AutogradContext::saved_data (an IValue capsule holds any
/// torch::CustomClassHolder).
struct CheckpointState : torch::CustomClassHolder {
  CheckpointState(Block block_in, RngState rng_in, AutocastState autocast_in)
      : block(std::move(block_in)), rng(std::move(rng_in)), autocast(autocast_in) {}
  Block block;
  RngState rng;            // the generators' states just before the forward
  AutocastState autocast;  // the autocast settings the forward ran under
};

/// Turns off autocast's cache of casted weights for its lifetime. A cast made under NoGradGuard
/// has no gradient edge; cached, it would be reused by a later use of the same weight in the
/// forward pass that does need its gradient.
class NoAutocastCache {
 public:
  NoAutocastCache() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(was_); }
  NoAutocastCache(const NoAutocastCache&) = delete;
  NoAutocastCache& operator=(const NoAutocastCache&) = delete;

 private:
  bool was_;
};

constexpr const char* kStateKey = "bigbatch.checkpoint";

/// Whether this thread is inside a recompute (read by is_recomputing()).
thread_local bool recomputing = false;

/// Sets `recomputing` for its lifetime and restores the previous value (nested checkpoints).
class RecomputeScope {
 public:
  RecomputeScope() : was_(recomputing) { recomputing = true; }
  ~RecomputeScope() { recomputing = was_; }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool was_;
};

/// Throws std::logic_error when the recomputed graph reaches a tensor that requires grad but is
/// neither the block's input nor one of its parameters: torch::autograd::grad would leave it
/// without a gradient that a plain call gives it. `first_node` is the sequence number of the
/// first node the recompute created; older nodes belong to the graph outside the block.
void check_every_source_is_listed(const torch::Tensor& output, const variable_list& sources,
                                  uint64_t first_node) {
  std::unordered_set<const c10::TensorImpl*> listed;
  for (const auto& source : sources)
    listed.insert(source.unsafeGetTensorImpl());
  std::vector<torch::autograd::Node*> stack = {output.grad_fn().get()};
  std::unordered_set<torch::autograd::Node*> seen(stack.begin(), stack.end());
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      BB_CHECK(listed.count(leaf->variable.unsafeGetTensorImpl()) > 0,
               "checkpoint: the block uses a tensor of shape ", leaf->variable.sizes(),
               " that requires grad but is not in `parameters`; it would get no gradient");
      continue;
    }
    BB_CHECK(node->sequence_nr() >= first_node,
             "checkpoint: the block uses a tensor computed outside it (", node->name(),
             ") that requires grad; pass it as the input or detach it");
    for (const auto& edge : node->next_edges()) {
      torch::autograd::Node* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second)
        stack.push_back(next);
    }
  }
}

/// The autograd function behind checkpoint(). Forward inputs, in order: the state capsule
/// (not a tensor), `input`, then each of `parameters`; backward returns a gradient for each.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<CheckpointState> state,
                               const torch::Tensor& input, torch::TensorList parameters) {
    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      NoAutocastCache no_cache;
      output = state->block(input);
    }
    variable_list saved = {input};
    saved.insert(saved.end(), parameters.begin(), parameters.end());
    ctx->save_for_backward(saved);
    ctx->saved_data[kStateKey] = c10::IValue::make_capsule(std::move(state));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();  // input, parameters...
    const auto holder = ctx->saved_data.at(kStateKey).toCapsule();
    const auto& state = static_cast<const CheckpointState&>(*holder);

    // Differentiate with respect to a detached copy of the input so that the recomputed graph
    // ends here instead of reaching into the graph before the block.
    const torch::Tensor input = saved[0].detach().requires_grad_(saved[0].requires_grad());
    variable_list sources;            // what the gradient is taken with respect to
    std::vector<size_t> source_slot;  // position of each source in `saved`
    for (size_t i = 0; i < saved.size(); ++i) {
      if (saved[i].requires_grad()) {
        sources.push_back(i == 0 ? input : saved[i]);
        source_slot.push_back(i);
      }
    }

    torch::Tensor output;
    const uint64_t first_node = at::sequence_number::peek();
    {
      torch::AutoGradMode grad_mode(true);
      AutocastGuard autocast(state.autocast);  // as in the forward, whatever is in effect now
      const RngState at_backward = RngState::capture(input.device());
      state.rng.restore();
      try {
        RecomputeScope recompute;
        output = state.block(input);
      } catch (...) {
        at_backward.restore();
        throw;
      }
      at_backward.restore();
    }

    variable_list grads(1 + saved.size());  // capsule, input, parameters...; undefined = none
    if (!output.requires_grad())
      return grads;  // the output does not depend on anything differentiable
    check_every_source_is_listed(output, sources, first_node);
    const variable_list source_grads =
        torch::autograd::grad({output}, sources, {grad_outputs[0]}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < sources.size(); ++k)
      grads[1 + source_slot[k]] = source_grads[k];
    return grads;
  }
};

}  // namespace

torch::Tensor checkpoint(Block block, const torch::Tensor& input, torch::TensorList parameters) {
  bool needs_grad = input.requires_grad();
  for (const auto& parameter : parameters)
    needs_grad = needs_grad || parameter.requires_grad();
  if (!torch::GradMode::is_enabled() || !needs_grad)
    return block(input);
  auto state = c10::make_intrusive<CheckpointState>(
      std::move(block), RngState::capture(input.device()), AutocastState::capture());
  return CheckpointFunction::apply(std::move(state), input, parameters);
}

bool is_recomputing() {
  return recomputing;
}

bool CheckpointPolicy::applies_to(int64_t block_index) const {
  switch (mode) {
    case CheckpointMode::kNone:
      return false;
    case CheckpointMode::kBlocks:
      return true;
    case CheckpointMode::kEvery:
      validate(*this);
      return block_index % every == 0;
  }
  return false;
}

std::string CheckpointPolicy::to_string() const {
  switch (mode) {
    case CheckpointMode::kNone:
      return "none";
    case CheckpointMode::kBlocks:
      return "blocks";
    case CheckpointMode::kEvery:
      return cat("every:", every);
  }
  return "?";
}

void validate(const CheckpointPolicy& policy) {
  BB_CHECK_INPUT(policy.mode != CheckpointMode::kEvery || policy.every >= 1,
                 "CheckpointPolicy.every must be >= 1, got ", policy.every);
}

CheckpointPolicy parse_checkpoint_policy(const std::string& text, const std::string& field) {
  const auto invalid = [&] {
    return InputError(
        cat(field, " must be \"none\", \"blocks\" or \"every:N\" with an integer N >= 1, got \"",
            text, "\""));
  };
  CheckpointPolicy policy;
  if (text == "none")
    return policy;
  if (text == "blocks") {
    policy.mode = CheckpointMode::kBlocks;
    return policy;
  }
  const std::string prefix = "every:";
  if (text.compare(0, prefix.size(), prefix) != 0)
    throw invalid();
  const char* first = text.data() + prefix.size();
  const char* last = text.data() + text.size();
  int64_t every = 0;
  const auto [end, error] = std::from_chars(first, last, every);
  if (first == last || error != std::errc() || end != last || every < 1)
    throw invalid();
  policy.mode = CheckpointMode::kEvery;
  policy.every = every;
  return policy;
}

}  // namespace bigbatch::nn
