// Exporting a trained built-in model so that it can leave bigbatch: weights as safetensors under
// PyTorch's names, with the model spec beside them; and loading such an export back.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/io/safetensors.h"
#include "bigbatch/models/model_spec.h"

namespace bigbatch::models {

/// The `__metadata__` key of an export's safetensors file that holds the model spec as JSON.
inline constexpr const char* kSpecMetadataKey = "bigbatch_spec";

/// Every parameter and buffer of `module` under its dotted PyTorch-style name, in PyTorch's
/// state_dict order: module by module (named_modules() order), each module's own parameters
/// and then its own buffers (BatchNorm's running_mean, running_var, num_batches_tracked).
std::vector<io::NamedTensor> state_tensors(const torch::nn::Module& module);

/// Where export_model puts the spec: `out` with its extension replaced by ".json"
/// (model.safetensors -> model.json; an `out` without an extension gets ".json" appended).
std::string spec_path_for(const std::string& out);

/// Writes the export of `module`, a model built from `spec` (build_model):
/// - `out` (for example model.safetensors): safetensors holding state_tensors(module), as
///   stored (model.dtype; num_batches_tracked int64), with the metadata {"format": "pt",
///   "bigbatch_spec": spec_to_json(spec) as compact JSON};
/// - spec_path_for(out) (model.json): the spec as pretty-printed JSON, for people.
/// Both are written atomically. Throws InputError when `out` ends in ".json" (the spec would
/// overwrite it) or when the module's tensors do not match what build_model(spec) has (a missing,
/// extra or mis-shaped tensor, named): an export always loads back.
void export_model(const torch::nn::Module& module, const ModelSpec& spec, const std::string& out);

/// A model loaded from an export.
struct ExportedModel {
  BuiltModel model;  ///< in eval mode, weights and buffers from the file
  ModelSpec spec;    ///< read from the file's metadata
};

/// Loads what export_model wrote: reads the spec from the safetensors metadata, builds the model
/// (the global torch generator is left as it was) and copies every parameter and buffer from the
/// file into it, then sets eval mode. Throws InputError naming the file and the cause for a file
/// that is not valid safetensors (see io::parse_safetensors), a missing or invalid spec, a tensor
/// the model needs but the file lacks, a tensor in the file the model does not have, and a tensor
/// of another shape or dtype (each naming the tensor, the expected and the found).
ExportedModel load_exported(const std::string& path);

/// "gpt model": how errors name a built-in model of `spec` (load_weights' `what`).
std::string model_words(const ModelSpec& spec);

/// Sets every parameter and buffer of `module` to the tensor of the same state_tensors name in the
/// safetensors file `path`: an export (export_model) or any safetensors file of the module's state
/// under PyTorch's names (a state_dict saved by safetensors.torch.save_file). Floating-point
/// tensors are converted to the module's dtype; others (num_batches_tracked) must have it. Throws
/// InputError naming the file and the cause for a file that is not valid safetensors, and for a
/// missing, extra or mis-shaped tensor (named, with `what` naming the module: "the gpt model
/// needs [256, 16]"); nothing is copied unless every tensor fits. A spec in the file, if any, is
/// not consulted: the tensors decide. Works for any module, built-in or not.
void load_weights(torch::nn::Module& module, const std::string& path,
                  const std::string& what = "model");

}  // namespace bigbatch::models
