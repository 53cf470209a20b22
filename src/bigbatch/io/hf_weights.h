// The weights of a model directory in Hugging Face's layout: model.safetensors, or its shards
// model-0000N-of-0000M.safetensors listed by model.safetensors.index.json.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace bigbatch::io {

/// Every tensor of a model directory's checkpoint, by its name in the checkpoint.
struct HfWeights {
  /// name -> CPU tensor in the file's dtype, viewing the memory-mapped file (map_safetensors).
  std::map<std::string, torch::Tensor> tensors;
  /// The safetensors files read, in the order read (one, or the shards in name order).
  std::vector<std::string> files;
};

/// The file names of the layout.
constexpr const char* kHfWeightsFile = "model.safetensors";
constexpr const char* kHfWeightsIndexFile = "model.safetensors.index.json";

/// Reads the weights of the model directory `directory`: model.safetensors when it is there,
/// otherwise every shard that model.safetensors.index.json's "weight_map" names. Throws
/// InputError naming the file and what was expected when the directory or both files are
/// missing; the index is not JSON or has no "weight_map" object of strings; a shard it names is
/// missing or not safetensors; a tensor it maps to a shard is not in that shard, or a shard holds
/// a tensor the map does not send there; or two files hold a tensor of the same name.
HfWeights read_hf_weights(const std::string& directory);

}  // namespace bigbatch::io
