// The tiny Hugging Face model directories and golden files under tests/hf, for the models tests.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bigbatch::testing {

/// The path of `name` under tests/hf: a model directory ("tiny-bert") or a golden file.
inline std::string hf_dir(const std::string& name) {
  return std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/" + name;
}

/// A JSON array of equally long integer rows -> (rows, columns) int64
inline torch::Tensor int_rows(const nlohmann::json& value) {
  std::vector<int64_t> flat;
  for (const auto& row : value)
    for (int64_t v : row.get<std::vector<int64_t>>())
      flat.push_back(v);
  return torch::tensor(flat, torch::kLong).view({int64_t(value.size()), -1});
}

}  // namespace bigbatch::testing
