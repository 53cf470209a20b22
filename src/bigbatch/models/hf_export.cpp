#include "bigbatch/models/hf_export.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/lora_merge.h"

namespace bigbatch::models {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

/// The files of a model directory besides config.json and the weights that an export carries over.
const char* const kTokenizerFiles[] = {"tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "tokenizer.model",
                                       "vocab.txt",
                                       "merges.txt",
                                       "vocab.json",
                                       "added_tokens.json",
                                       "generation_config.json",
                                       "chat_template.jinja"};

const char* const kPeftPrefix = "base_model.model.";

/// The module part of a tensor's name: "a.b.weight" -> "a.b" ("" for a top-level tensor).
std::string module_of(const std::string& tensor) {
  const size_t dot = tensor.rfind('.');
  return dot == std::string::npos ? "" : tensor.substr(0, dot);
}

/// Whether `name` is `module` or lies inside it.
bool inside(const std::string& name, const std::string& module) {
  return name == module || starts_with(name, module + ".");
}

/// The AdaptedLinear layers of `module` that carry an adapter, by name.
std::map<std::string, const nn::AdaptedLinearImpl*> adapted_layers(
    const torch::nn::Module& module) {
  std::map<std::string, const nn::AdaptedLinearImpl*> layers;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const auto* layer = item.value()->as<nn::AdaptedLinear>();
    if (layer != nullptr && layer->has_lora())
      layers[item.key()] = layer;
  }
  return layers;
}

/// `tensor` as an export stores it: on the CPU, contiguous, float32 when it is floating point.
torch::Tensor exported(const torch::Tensor& tensor) {
  torch::NoGradGuard no_grad;
  const torch::Tensor cpu = tensor.detach().to(torch::kCPU);
  return (cpu.is_floating_point() ? cpu.to(torch::kFloat) : cpu).contiguous();
}

/// The source's config.json with what the export changes (see save_hf_model).
Json export_config(const HfModel& model, const fs::path& source, const HfExportOptions& options) {
  const fs::path path = source / "config.json";
  Json config;
  try {
    config = Json::parse(io::read_file(path.string()));
  } catch (const nlohmann::json::exception& error) {
    throw InputError(cat(path.string(), " is not valid JSON: ", error.what()));
  }
  config["architectures"] = Json::array({hf_architecture(model.model_type).class_name});
  if (config.contains("torch_dtype"))
    config["torch_dtype"] = "float32";
  config["dtype"] = "float32";
  if (model.task != HfTask::kClassification)
    return config;
  const int64_t classes = model.outputs();
  std::vector<std::string> labels = options.class_names();
  BB_CHECK_INPUT(labels.empty() || int64_t(labels.size()) == classes,
                 "HfExportOptions.class_names has ", labels.size(), " names for a classifier of ",
                 classes, " classes");
  const Json source_labels = config.value("id2label", Json());
  if (labels.empty() && source_labels.is_object() && int64_t(source_labels.size()) == classes) {
    for (int64_t i = 0; i < classes; ++i) {
      const std::string key = std::to_string(i);
      labels.push_back(source_labels.contains(key) && source_labels[key].is_string()
                           ? source_labels[key].get<std::string>()
                           : cat("LABEL_", i));
    }
  }
  for (int64_t i = int64_t(labels.size()); i < classes; ++i)
    labels.push_back(cat("LABEL_", i));
  Json id2label = Json::object(), label2id = Json::object();
  for (int64_t i = 0; i < classes; ++i) {
    BB_CHECK_INPUT(!label2id.contains(labels[i]), "HfExportOptions.class_names: \"", labels[i],
                   "\" names two classes");
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
  if (config.contains("num_labels"))
    config["num_labels"] = classes;
  return config;
}

/// model.safetensors of kMerged: every state tensor, adapters folded into their weights.
std::vector<io::NamedTensor> merged_tensors(const torch::nn::Module& module) {
  const auto adapters = adapted_layers(module);
  std::vector<io::NamedTensor> tensors;
  for (const auto& [name, tensor] : state_tensors(module)) {
    const std::string owner = module_of(name);  // "x.lora_A" for an adapter's tensor
    if ((ends_with(owner, ".lora_A") || ends_with(owner, ".lora_B")) &&
        adapters.count(module_of(owner)) != 0)
      continue;
    const auto layer = adapters.find(owner);
    if (layer != adapters.end() && name == owner + ".weight")
      tensors.emplace_back(name, exported(merged_lora_weight(*layer->second, torch::kFloat)));
    else
      tensors.emplace_back(name, exported(tensor));
  }
  return tensors;
}

/// What kPeft writes: the tensors and adapter_config.json.
struct PeftExport {
  std::vector<io::NamedTensor> tensors;
  Json config;
};

PeftExport peft_export(const HfModel& model, const fs::path& source,
                       const HfExportOptions& options) {
  const torch::nn::Module& module = *model.module();
  const auto adapters = adapted_layers(module);
  BB_CHECK_INPUT(!adapters.empty(), "HfExportOptions.mode = kPeft: the ", model.model_type,
                 " model has no LoRA adapters (nn::apply_lora); export it with kMerged");
  const nn::AdaptedLinearImpl& first = *adapters.begin()->second;
  const int64_t rank = first.lora_A.size(0);
  for (const auto& [name, layer] : adapters) {
    BB_CHECK_INPUT(layer->lora_A.size(0) == rank && layer->lora_scale() == first.lora_scale() &&
                       layer->lora_dropout() == first.lora_dropout() &&
                       layer->layout() == first.layout(),
                   "HfExportOptions.mode = kPeft: the adapter of \"", name, "\" (rank ",
                   layer->lora_A.size(0), ", scale ", layer->lora_scale(), ", dropout ",
                   layer->lora_dropout(), ") differs from that of \"", adapters.begin()->first,
                   "\" (rank ", rank, ", scale ", first.lora_scale(), ", dropout ",
                   first.lora_dropout(), "); one adapter_config.json describes them all");
  }

  // The modules saved in full: those options.modules_to_save names, and those of fresh tensors.
  std::vector<std::string> saved;
  std::set<std::string> unmatched(options.modules_to_save().begin(),
                                  options.modules_to_save().end());
  std::set<std::string> wanted;
  for (const std::string& head : model.trained_heads())
    wanted.insert(head);
  const auto modules = module.named_modules("", /*include_self=*/false);
  for (const auto& item : modules) {
    for (const std::string& pattern : options.modules_to_save()) {
      if (nn::module_named(item.key(), pattern)) {
        unmatched.erase(pattern);
        wanted.insert(item.key());
      }
    }
  }
  BB_CHECK_INPUT(unmatched.empty(), "HfExportOptions.modules_to_save: \"", *unmatched.begin(),
                 "\" names no module of the model");
  for (const auto& item : modules) {
    if (wanted.count(item.key()) == 0)
      continue;
    bool nested = false;  // inside a module saved already: its tensors are saved with it
    for (const std::string& outer : saved)
      nested = nested || inside(item.key(), outer);
    if (nested)
      continue;
    for (const auto& [adapted, layer] : adapters) {
      BB_CHECK_INPUT(!inside(adapted, item.key()), "HfExportOptions.modules_to_save: \"",
                     item.key(), "\" holds the adapted module \"", adapted,
                     "\"; PEFT saves a module either in full or as an adapter");
    }
    saved.push_back(item.key());
  }

  // Every trained tensor must be in the export: an adapter's or a saved module's.
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad())
      continue;
    const std::string owner = module_of(item.key());
    bool exported_here = adapters.count(module_of(owner)) != 0 &&
                         (ends_with(owner, ".lora_A") || ends_with(owner, ".lora_B"));
    for (const std::string& outer : saved)
      exported_here = exported_here || inside(item.key(), outer);
    BB_CHECK_INPUT(exported_here, "HfExportOptions.mode = kPeft: the trainable parameter \"",
                   item.key(),
                   "\" is neither an adapter's nor in HfExportOptions.modules_to_save, so a PEFT "
                   "adapter would lose its training; add its module there or export with kMerged");
  }

  PeftExport result;
  std::vector<std::string> targets;
  for (const auto& item : modules) {
    const auto layer = adapters.find(item.key());
    if (layer == adapters.end())
      continue;
    targets.push_back(item.key());
    result.tensors.emplace_back(kPeftPrefix + item.key() + ".lora_A.weight",
                                exported(layer->second->lora_A));  // (rank, in)
    result.tensors.emplace_back(kPeftPrefix + item.key() + ".lora_B.weight",
                                exported(layer->second->lora_B));  // (out, rank)
  }
  for (const std::string& name : saved) {
    for (const auto& [tensor_name, tensor] : state_tensors(*modules[name]))
      result.tensors.emplace_back(kPeftPrefix + name + "." + tensor_name, exported(tensor));
  }

  const double alpha = first.lora_scale() * double(rank);
  Json& config = result.config;
  config["peft_type"] = "LORA";
  config["task_type"] = model.task == HfTask::kClassification ? "SEQ_CLS" : "CAUSAL_LM";
  config["base_model_name_or_path"] = fs::absolute(source).lexically_normal().string();
  config["r"] = rank;
  if (alpha == double(int64_t(alpha)))
    config["lora_alpha"] = int64_t(alpha);
  else
    config["lora_alpha"] = alpha;
  config["lora_dropout"] = first.lora_dropout();
  config["target_modules"] = targets;
  config["modules_to_save"] = saved.empty() ? Json() : Json(saved);
  config["bias"] = "none";
  config["fan_in_fan_out"] = first.layout() == nn::WeightLayout::kInOut;
  config["inference_mode"] = true;
  config["init_lora_weights"] = true;
  config["use_rslora"] = false;
  config["use_dora"] = false;
  config["layers_to_transform"] = nullptr;
  config["layers_pattern"] = nullptr;
  config["rank_pattern"] = Json::object();
  config["alpha_pattern"] = Json::object();
  config["revision"] = nullptr;
  return result;
}

/// Whether `path` is a directory that holds anything.
bool holds_files(const fs::path& path) {
  return fs::is_directory(path) && fs::directory_iterator(path) != fs::directory_iterator();
}

}  // namespace

std::vector<std::string> save_hf_model(const HfModel& model, const HfExportOptions& options) {
  BB_CHECK_INPUT(!options.output_directory().empty(), "HfExportOptions.output_directory is empty");
  const fs::path source = options.source_directory();
  const fs::path out = fs::path(options.output_directory()).lexically_normal();
  BB_CHECK_INPUT(!source.empty() && fs::is_directory(source), "HfExportOptions.source_directory \"",
                 source.string(), "\" is not a directory");
  const std::string source_type = read_hf_model_type(source.string());
  BB_CHECK_INPUT(source_type == model.model_type, "HfExportOptions.source_directory \"",
                 source.string(), "\" holds a ", source_type, " model, not the ", model.model_type,
                 " being exported");
  BB_CHECK_INPUT(!fs::exists(out) || fs::is_directory(out), "HfExportOptions.output_directory \"",
                 out.string(), "\" is a file");
  BB_CHECK_INPUT(options.overwrite() || !holds_files(out), "HfExportOptions.output_directory \"",
                 out.string(),
                 "\" already holds files; choose another or set HfExportOptions.overwrite");

  // Everything is computed before anything is written.
  std::vector<std::pair<std::string, std::string>> files;  // (name, bytes)
  if (options.mode() == HfExportMode::kPeft) {
    const PeftExport peft = peft_export(model, source, options);
    files.emplace_back("adapter_config.json", peft.config.dump(2) + "\n");
    files.emplace_back("adapter_model.safetensors",
                       io::safetensors_bytes(peft.tensors, {{"format", "pt"}}));
  } else {
    files.emplace_back("config.json", export_config(model, source, options).dump(2) + "\n");
    files.emplace_back("model.safetensors",
                       io::safetensors_bytes(merged_tensors(*model.module()), {{"format", "pt"}}));
    for (const char* name : kTokenizerFiles) {
      if (fs::is_regular_file(source / name))
        files.emplace_back(name, io::read_file((source / name).string()));
    }
  }

  const std::string pid = std::to_string(::getpid());
  const fs::path partial = out.string() + ".partial-" + pid;
  const fs::path old = out.string() + ".old-" + pid;
  std::vector<std::string> written;
  try {
    fs::remove_all(partial);
    fs::create_directories(partial);
    for (const auto& [name, bytes] : files) {
      io::write_file_atomically((partial / name).string(), bytes);
      written.push_back(name);
    }
    if (fs::exists(out))
      fs::rename(out, old);
    fs::rename(partial, out);
    fs::remove_all(old);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    if (!fs::exists(out, ignored) && fs::exists(old, ignored))
      fs::rename(old, out, ignored);  // put the previous export back
    throw;
  }
  return written;
}

}  // namespace bigbatch::models
