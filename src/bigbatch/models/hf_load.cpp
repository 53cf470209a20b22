#include "bigbatch/models/hf_load.h"

#include <set>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"

namespace bigbatch::models {
namespace {

bool starts_with_any(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    if (starts_with(name, prefix))
      return true;
  }
  return false;
}

/// The names a checkpoint may store the module's tensor `name` under: as it is, without the
/// optional prefix, and each with a LayerNorm's legacy gamma/beta.
std::vector<std::string> checkpoint_names(const std::string& name, const std::string& prefix) {
  std::vector<std::string> names = {name};
  if (!prefix.empty() && starts_with(name, prefix))
    names.push_back(name.substr(prefix.size()));
  const std::pair<const char*, const char*> kLegacy[] = {{"LayerNorm.weight", "LayerNorm.gamma"},
                                                         {"LayerNorm.bias", "LayerNorm.beta"}};
  for (size_t i = 0, plain = names.size(); i < plain; ++i) {
    for (const auto& [current, legacy] : kLegacy) {
      if (ends_with(names[i], current))
        names.push_back(names[i].substr(0, names[i].size() - std::string(current).size()) + legacy);
    }
  }
  return names;
}

}  // namespace

HfLoadResult load_hf_weights(torch::nn::Module& module, const io::HfWeights& weights,
                             const HfLoadOptions& options, const std::string& origin) {
  std::vector<std::pair<torch::Tensor, const torch::Tensor*>> copies;  // (destination, source)
  std::set<std::string> used;
  HfLoadResult result;
  std::string missing;
  const auto is_ignored = [&options](const std::string& name) {
    for (const std::string& suffix : options.ignored_suffixes()) {
      if (name == suffix || ends_with(name, "." + suffix))
        return true;
    }
    return false;
  };
  const auto place = [&](const std::string& name, const torch::Tensor& destination) {
    auto found = weights.tensors.end();
    for (const std::string& stored : checkpoint_names(name, options.optional_prefix())) {
      found = weights.tensors.find(stored);
      if (found != weights.tensors.end())
        break;
    }
    if (found != weights.tensors.end() && is_ignored(found->first))
      found = weights.tensors.end();
    if (found == weights.tensors.end()) {
      if (starts_with_any(name, options.fresh_prefixes()))
        result.fresh.push_back(name);
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
    if (used.count(name) != 0 || is_ignored(name))
      continue;
    if (starts_with_any(name, options.unused_prefixes()))
      result.unused.push_back(name);
    else
      unexpected += cat(unexpected.empty() ? "" : ", ", "\"", name, "\"");
  }
  BB_CHECK_INPUT(unexpected.empty(), origin, ": the model has no place for the checkpoint's ",
                 unexpected);
  torch::NoGradGuard no_grad;
  for (auto& [destination, source] : copies)
    destination.copy_(*source);
  return result;
}

}  // namespace bigbatch::models
