#include "bigbatch/io/hf_weights.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "bigbatch/core/check.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/io/safetensors.h"

namespace bigbatch::io {
namespace {

namespace fs = std::filesystem;

/// Adds the tensors of the safetensors file `path` to `weights`, refusing a name already there.
void add_file(const fs::path& path, HfWeights& weights) {
  Safetensors file = map_safetensors(path.string());
  for (auto& [name, tensor] : file.tensors) {
    BB_CHECK_INPUT(weights.tensors.emplace(name, std::move(tensor)).second, path.string(),
                   ": tensor \"", name, "\" is also in an earlier file of the checkpoint");
  }
  weights.files.push_back(path.string());
}

/// The index's weight_map: shard file name -> the tensor names it holds.
std::map<std::string, std::set<std::string>> read_weight_map(const fs::path& index_path) {
  std::string text;
  try {
    text = read_file(index_path.string());
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(cat(index_path.string(), ": not valid JSON: ", error.what()));
  }
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  BB_CHECK_INPUT(index.is_object() && map != index.end() && map->is_object(), index_path.string(),
                 ": expected an object with a \"weight_map\" object (tensor name -> shard file)");
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& [name, shard] : map->items()) {
    BB_CHECK_INPUT(shard.is_string(), index_path.string(), ": weight_map[\"", name,
                   "\"] must be a shard's file name, got ", shard.dump());
    const std::string file = shard.get<std::string>();
    BB_CHECK_INPUT(!file.empty() && fs::path(file).filename() == file, index_path.string(),
                   ": weight_map[\"", name, "\"] = \"", file,
                   "\" must name a file in the model directory");
    shards[file].insert(name);
  }
  BB_CHECK_INPUT(!shards.empty(), index_path.string(), ": weight_map is empty");
  return shards;
}

}  // namespace

HfWeights read_hf_weights(const std::string& directory) {
  const fs::path dir(directory);
  BB_CHECK_INPUT(fs::is_directory(dir), directory, ": not a model directory (no such directory)");
  HfWeights weights;
  if (fs::exists(dir / kHfWeightsFile)) {
    add_file(dir / kHfWeightsFile, weights);
    return weights;
  }
  const fs::path index_path = dir / kHfWeightsIndexFile;
  BB_CHECK_INPUT(fs::exists(index_path), directory, ": no weights: expected ", kHfWeightsFile,
                 ", or ", kHfWeightsIndexFile, " with the shards it names");
  for (const auto& [file, names] : read_weight_map(index_path)) {
    const fs::path shard = dir / file;
    BB_CHECK_INPUT(fs::exists(shard), shard.string(), ": missing shard; ", kHfWeightsIndexFile,
                   " maps ", names.size(), " tensors to it, \"", *names.begin(), "\" first");
    const size_t before = weights.tensors.size();
    add_file(shard, weights);
    for (const std::string& name : names) {
      BB_CHECK_INPUT(weights.tensors.count(name) > 0, shard.string(), ": no tensor \"", name,
                     "\", which ", kHfWeightsIndexFile, " maps to this shard");
    }
    BB_CHECK_INPUT(weights.tensors.size() - before == names.size(), shard.string(), ": holds ",
                   weights.tensors.size() - before, " tensors, but ", kHfWeightsIndexFile, " maps ",
                   names.size(), " to it");
  }
  return weights;
}

}  // namespace bigbatch::io
