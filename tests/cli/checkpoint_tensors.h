// The model tensors stored in a checkpoint file, read independently of engine/checkpoint.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/io/checkpoint_file.h"

namespace bigbatch {

/// The model tensors of a checkpoint file, in order.
inline std::vector<torch::Tensor> model_tensors(const std::string& path) {
  const io::CheckpointFile file = io::read_checkpoint_file(path);
  torch::serialize::InputArchive archive;
  archive.load_from(file.payload.data(), file.payload.size());
  torch::serialize::InputArchive model;
  archive.read("model", model);
  const auto header = nlohmann::json::parse(file.header);
  std::vector<torch::Tensor> tensors;
  for (size_t i = 0; i < header.at("model").size(); ++i) {
    torch::Tensor tensor;
    model.read("t" + std::to_string(i), tensor, header["model"][i]["buffer"].get<bool>());
    tensors.push_back(tensor);
  }
  return tensors;
}

}  // namespace bigbatch
