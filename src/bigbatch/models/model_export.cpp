#include "bigbatch/models/model_export.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/io/atomic_file.h"

namespace bigbatch::models {
namespace {

std::string shape_text(const torch::Tensor& tensor) {
  return cat(tensor.sizes());
}

/// A comma-separated list of quoted names.
std::string quoted(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names)
    text += (text.empty() ? "\"" : ", \"") + name + "\"";
  return text;
}

/// Whether a tensor must have the model's dtype, or may be any floating-point dtype where the
/// model's is one (copied with conversion).
enum class DtypeMatch { kExact, kFloatingConverts };

/// For each tensor of `wanted` (the model's), the tensor of `given` with its name, shape and
/// dtype (see DtypeMatch). Throws InputError starting with `origin` naming every missing and extra
/// tensor, or the first one of another shape or dtype.
std::vector<torch::Tensor> match_tensors(const std::vector<io::NamedTensor>& wanted,
                                         const std::vector<io::NamedTensor>& given,
                                         const std::string& origin, const std::string& model,
                                         DtypeMatch dtypes = DtypeMatch::kExact) {
  std::map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, tensor] : given)
    by_name[name] = &tensor;
  std::vector<std::string> missing;
  std::vector<torch::Tensor> matched;
  for (const auto& [name, tensor] : wanted) {
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      missing.push_back(name);
      continue;
    }
    const torch::Tensor& other = *found->second;
    BB_CHECK_INPUT(other.sizes() == tensor.sizes(), origin, ": tensor \"", name, "\" has shape ",
                   shape_text(other), ", the ", model, " needs ", shape_text(tensor));
    const bool converts = dtypes == DtypeMatch::kFloatingConverts && other.is_floating_point() &&
                          tensor.is_floating_point();
    BB_CHECK_INPUT(converts || other.scalar_type() == tensor.scalar_type(), origin, ": tensor \"",
                   name, "\" has dtype ", other.dtype(), ", the ", model, " needs ",
                   tensor.dtype());
    matched.push_back(other);
    by_name.erase(found);
  }
  BB_CHECK_INPUT(missing.empty(), origin, ": ", missing.size(), " tensor(s) the ", model,
                 " needs are missing: ", quoted(missing));
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : given) {
    if (by_name.count(name) != 0)
      extra.push_back(name);
  }
  BB_CHECK_INPUT(extra.empty(), origin, ": ", extra.size(), " tensor(s) are not in the ", model,
                 ": ", quoted(extra));
  return matched;
}

/// The model of `spec`, built without touching the global generator's state.
BuiltModel build_quietly(const ModelSpec& spec) {
  const RngState rng = RngState::capture(torch::kCPU);
  BuiltModel built = build_model(spec);
  rng.restore();
  return built;
}

/// Copies values[i] into the i-th of state_tensors(module), converting dtypes, without
/// recording gradients.
void copy_into(const torch::nn::Module& module, const std::vector<torch::Tensor>& values) {
  const std::vector<io::NamedTensor> targets = state_tensors(module);
  BB_CHECK(targets.size() == values.size(), targets.size(), " tensors, ", values.size(), " values");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i)
    targets[i].second.copy_(values[i]);
}

}  // namespace

std::string model_words(const ModelSpec& spec) {
  return cat(to_string(spec.kind), " model");
}

std::vector<io::NamedTensor> state_tensors(const torch::nn::Module& module) {
  std::vector<io::NamedTensor> tensors;
  const auto append_own = [&tensors](const torch::nn::Module& owner, const std::string& prefix) {
    for (const auto& parameter : owner.named_parameters(/*recurse=*/false))
      tensors.emplace_back(prefix + parameter.key(), parameter.value());
    for (const auto& buffer : owner.named_buffers(/*recurse=*/false))
      tensors.emplace_back(prefix + buffer.key(), buffer.value());
  };
  append_own(module, "");
  // Without include_self, which would need `module` to be held by a shared_ptr.
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false))
    append_own(*item.value(), item.key() + ".");
  return tensors;
}

std::string spec_path_for(const std::string& out) {
  return std::filesystem::path(out).replace_extension(".json").string();
}

void export_model(const torch::nn::Module& module, const ModelSpec& spec, const std::string& out) {
  BB_CHECK_INPUT(std::filesystem::path(out).extension() != ".json", "export path ", out,
                 " ends in .json, where the spec goes; name it for example model.safetensors");
  const std::vector<io::NamedTensor> tensors = state_tensors(module);
  const BuiltModel reference = build_quietly(spec);
  match_tensors(state_tensors(*reference.module), tensors, "export_model: the module",
                model_words(spec));
  const nlohmann::ordered_json json = spec_to_json(spec);
  io::write_safetensors(out, tensors, {{"format", "pt"}, {kSpecMetadataKey, json.dump()}});
  io::write_file_atomically(spec_path_for(out), json.dump(2) + "\n");
}

ExportedModel load_exported(const std::string& path) {
  const io::Safetensors file = io::read_safetensors(path);
  const auto text = file.metadata.find(kSpecMetadataKey);
  BB_CHECK_INPUT(text != file.metadata.end(), path,
                 ": not a bigbatch export: its safetensors metadata has no \"", kSpecMetadataKey,
                 "\" (the model spec)");
  nlohmann::ordered_json json;
  try {
    json = nlohmann::ordered_json::parse(text->second);
  } catch (const nlohmann::ordered_json::parse_error& error) {
    throw InputError(
        cat(path, ": the model spec in the metadata is not valid JSON: ", error.what()));
  }
  ExportedModel exported{{}, spec_from_json(json, path)};
  exported.model = build_quietly(exported.spec);
  copy_into(*exported.model.module, match_tensors(state_tensors(*exported.model.module),
                                                  file.tensors, path, model_words(exported.spec)));
  exported.model.module->eval();
  return exported;
}

void load_weights(torch::nn::Module& module, const std::string& path, const std::string& what) {
  const io::Safetensors file = io::read_safetensors(path);
  copy_into(module, match_tensors(state_tensors(module), file.tensors, path, what,
                                  DtypeMatch::kFloatingConverts));
}

}  // namespace bigbatch::models
