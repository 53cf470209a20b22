// io/hf_weights: a model directory's weights from model.safetensors or from the shards its index
// names, and every broken directory named with what was expected.
#include "bigbatch/io/hf_weights.h"

#include <gtest/gtest.h>

#include <string>

#include "bigbatch/io/safetensors.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

class HfWeightsDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(1);
    wte_ = torch::randn({10, 4});
    ln_ = torch::randn({4}).to(torch::kBFloat16);
    head_ = torch::randn({3, 4}, torch::kFloat64);
  }
  /// Shards: the first holds wte and ln, the second head.
  void write_shards() {
    io::write_safetensors(path("model-00001-of-00002.safetensors"),
                          {{"transformer.wte.weight", wte_}, {"transformer.ln_f.weight", ln_}});
    io::write_safetensors(path("model-00002-of-00002.safetensors"), {{"lm_head.weight", head_}});
  }
  void write_index(const std::string& weight_map) {
    dir_.write(io::kHfWeightsIndexFile,
               R"({"metadata": {"total_size": 248}, "weight_map": )" + weight_map + "}");
  }
  static std::string full_map() {
    return R"({"transformer.wte.weight": "model-00001-of-00002.safetensors",
               "transformer.ln_f.weight": "model-00001-of-00002.safetensors",
               "lm_head.weight": "model-00002-of-00002.safetensors"})";
  }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }
  std::string error() const {
    return testing::input_error_of([&] { io::read_hf_weights(dir_.path().string()); });
  }
  void expect_error(const std::string& part) const {
    const std::string message = error();
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }

  testing::TempDir dir_;
  torch::Tensor wte_, ln_, head_;
};

TEST_F(HfWeightsDirectory, ReadsASingleFile) {
  io::write_safetensors(path(io::kHfWeightsFile), {{"w", wte_}, {"b", ln_}});
  const io::HfWeights weights = io::read_hf_weights(dir_.path().string());
  ASSERT_EQ(weights.tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(weights.tensors.at("w"), wte_));
  EXPECT_EQ(weights.tensors.at("b").scalar_type(), torch::kBFloat16);
  EXPECT_EQ(weights.files, std::vector<std::string>{path(io::kHfWeightsFile)});
}

TEST_F(HfWeightsDirectory, ReadsEveryShardTheIndexNames) {
  write_shards();
  write_index(full_map());
  const io::HfWeights weights = io::read_hf_weights(dir_.path().string());
  ASSERT_EQ(weights.tensors.size(), 3u);
  EXPECT_TRUE(torch::equal(weights.tensors.at("transformer.wte.weight"), wte_));
  EXPECT_TRUE(torch::equal(weights.tensors.at("transformer.ln_f.weight"), ln_));
  EXPECT_TRUE(torch::equal(weights.tensors.at("lm_head.weight"), head_));
  EXPECT_EQ(weights.files, (std::vector<std::string>{path("model-00001-of-00002.safetensors"),
                                                     path("model-00002-of-00002.safetensors")}));
}

TEST_F(HfWeightsDirectory, NoDirectoryOrNoWeights) {
  EXPECT_EQ(testing::input_error_of([&] { io::read_hf_weights(path("absent")); }),
            path("absent") + ": not a model directory (no such directory)");
  expect_error(
      ": no weights: expected model.safetensors, or model.safetensors.index.json with "
      "the shards it names");
}

TEST_F(HfWeightsDirectory, AMissingShardIsNamedWithATensorItShouldHold) {
  write_shards();
  std::filesystem::remove(path("model-00002-of-00002.safetensors"));
  write_index(full_map());
  expect_error(path("model-00002-of-00002.safetensors") +
               ": missing shard; model.safetensors.index.json maps 1 tensors to it, "
               "\"lm_head.weight\" first");
}

TEST_F(HfWeightsDirectory, ATensorTheIndexPutsInTheWrongShard) {
  write_shards();
  write_index(R"({"transformer.wte.weight": "model-00001-of-00002.safetensors",
                  "transformer.ln_f.weight": "model-00002-of-00002.safetensors",
                  "lm_head.weight": "model-00002-of-00002.safetensors"})");
  expect_error(path("model-00001-of-00002.safetensors") +
               ": holds 2 tensors, but model.safetensors.index.json maps 1 to it");
  write_index(R"({"transformer.wte.weight": "model-00001-of-00002.safetensors",
                  "transformer.ln_f.weight": "model-00001-of-00002.safetensors",
                  "lm_head.bias": "model-00002-of-00002.safetensors"})");
  expect_error(path("model-00002-of-00002.safetensors") +
               ": no tensor \"lm_head.bias\", which model.safetensors.index.json maps to this "
               "shard");
}

TEST_F(HfWeightsDirectory, ATensorInTwoShards) {
  io::write_safetensors(path("a.safetensors"), {{"w", wte_}});
  io::write_safetensors(path("b.safetensors"), {{"w", wte_}});
  write_index(R"({"w": "a.safetensors", "x": "b.safetensors"})");
  expect_error(path("b.safetensors") + ": tensor \"w\" is also in an earlier file");
}

TEST_F(HfWeightsDirectory, ABrokenIndex) {
  write_index("[");
  expect_error(path(io::kHfWeightsIndexFile) + ": not valid JSON");
  dir_.write(io::kHfWeightsIndexFile, R"({"metadata": {}})");
  expect_error(path(io::kHfWeightsIndexFile) +
               ": expected an object with a \"weight_map\" object (tensor name -> shard file)");
  write_index(R"({"w": 3})");
  expect_error("weight_map[\"w\"] must be a shard's file name, got 3");
  write_index(R"({"w": "../elsewhere.safetensors"})");
  expect_error(
      "weight_map[\"w\"] = \"../elsewhere.safetensors\" must name a file in the model "
      "directory");
  write_index("{}");
  expect_error(": weight_map is empty");
}

TEST_F(HfWeightsDirectory, AShardThatIsNotSafetensors) {
  dir_.write("model-00001-of-00001.safetensors", "not safetensors");
  write_index(R"({"w": "model-00001-of-00001.safetensors"})");
  expect_error(path("model-00001-of-00001.safetensors") + ": header length");
}

}  // namespace
}  // namespace bigbatch
