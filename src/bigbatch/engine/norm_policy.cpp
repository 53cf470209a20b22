#include "bigbatch/engine/norm_policy.h"

#include "bigbatch/core/check.h"
#include "bigbatch/nn/norm.h"

namespace bigbatch::engine {

NormPolicy parse_norm_policy(const std::string& text, const std::string& field) {
  if (text == "keep")
    return NormPolicy::kKeep;
  if (text == "group")
    return NormPolicy::kGroup;
  if (text == "ghost")
    return NormPolicy::kGhost;
  throw InputError(cat(field, " = \"", text,
                       "\" is not a norm policy; expected \"keep\", \"group\" or \"ghost\""));
}

std::string to_string(NormPolicy policy) {
  switch (policy) {
    case NormPolicy::kKeep:
      return "keep";
    case NormPolicy::kGroup:
      return "group";
    case NormPolicy::kGhost:
      return "ghost";
  }
  return "?";
}

void BatchNormWindowHooks::on_window_begin() {
  nn::discard_window(model_);
}

void BatchNormWindowHooks::on_window_end(bool stepped) {
  if (stepped)
    nn::commit_window(model_);
  else
    nn::discard_window(model_);
}

std::string batch_norm_notice(int64_t batch_norms, const Plan& plan, NormPolicy policy) {
  if (batch_norms == 0)
    return "";
  const std::string layers = cat(batch_norms, " BatchNorm layer", batch_norms == 1 ? "" : "s");
  if (policy == NormPolicy::kGhost) {
    return cat(layers, ": statistics over ghost batches of ", plan.micro_batch,
               ", running statistics over the window of ", plan.global_batch);
  }
  if (plan.accum_steps == 1)
    return "";
  return cat(layers, " see micro-batches of ", plan.micro_batch, ", not the window of ",
             plan.global_batch, " (ghost: window running statistics; group: GroupNorm)");
}

}  // namespace bigbatch::engine
