#include "bigbatch/models/hf_load.h"

#include <set>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"

namespace bigbatch::models {

std::vector<std::string> load_hf_weights(torch::nn::Module& module, const io::HfWeights& weights,
                                         const HfLoadOptions& options, const std::string& origin) {
  std::vector<std::pair<torch::Tensor, const torch::Tensor*>> copies;  // (destination, source)
  std::set<std::string> used;
  std::vector<std::string> fresh;
  std::string missing;
  const auto is_ignored = [&options](const std::string& name) {
    for (const std::string& suffix : options.ignored_suffixes()) {
      if (ends_with(name, suffix))
        return true;
    }
    return false;
  };
  const auto place = [&](const std::string& name, const torch::Tensor& destination) {
    auto found = weights.tensors.find(name);
    const std::string& prefix = options.optional_prefix();
    if (found == weights.tensors.end() && !prefix.empty() && starts_with(name, prefix))
      found = weights.tensors.find(name.substr(prefix.size()));
    if (found != weights.tensors.end() && is_ignored(found->first))
      found = weights.tensors.end();
    if (found == weights.tensors.end()) {
      bool may_be_fresh = false;
      for (const std::string& fresh_prefix : options.fresh_prefixes())
        may_be_fresh = may_be_fresh || starts_with(name, fresh_prefix);
      if (may_be_fresh)
        fresh.push_back(name);
      else
        missing += cat(missing.empty() ? "" : ", ", "\"", name, "\"");
      return;
    }
    BB_CHECK_INPUT(found->second.sizes() == destination.sizes(), origin, ": tensor \"",
                   found->first, "\" has shape ", found->second.sizes(), " but the model's \"",
                   name, "\" has shape ", destination.sizes());
    used.insert(found->first);
    copies.emplace_back(destination, &found->second);
  };
  for (const auto& item : module.named_parameters())
    place(item.key(), item.value());
  for (const auto& item : module.named_buffers())
    place(item.key(), item.value());
  BB_CHECK_INPUT(missing.empty(), origin, ": the checkpoint lacks ", missing);
  std::string unexpected;
  for (const auto& [name, tensor] : weights.tensors) {
    if (used.count(name) == 0 && !is_ignored(name))
      unexpected += cat(unexpected.empty() ? "" : ", ", "\"", name, "\"");
  }
  BB_CHECK_INPUT(unexpected.empty(), origin, ": the model has no place for the checkpoint's ",
                 unexpected);
  torch::NoGradGuard no_grad;
  for (auto& [destination, source] : copies)
    destination.copy_(*source);
  return fresh;
}

}  // namespace bigbatch::models
