// cli/model_spec: the spec's JSON (layout, round trip, errors), what describe_model takes from
// the config and the data, and build_workload building exactly build_model(spec).
#include "bigbatch/cli/model_spec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bigbatch/cli/model_export.h"
#include "bigbatch/cli/workload.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/image_dataset.h"
#include "cli/cli_support.h"
#include "cli/export_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using cli::ModelKind;
using json = nlohmann::ordered_json;

cli::TrainConfig config_with(const std::vector<std::string>& overrides) {
  cli::TrainCommandOptions options;
  options.overrides = overrides;
  return cli::load_config(options);
}

/// Loaded resnet data: `classes` classes of random 1x6x6 images, normalised with their stats.
cli::LoadedData image_data(int64_t classes) {
  torch::manual_seed(4);
  const torch::Tensor images = torch::randint(0, 256, {4 * classes, 6, 6}, torch::kByte);
  const torch::Tensor labels = torch::arange(4 * classes, torch::kLong) % classes;
  const data::PixelStats stats = data::ImageDataset::pixel_stats(images);
  auto train = std::make_shared<data::ImageDataset>(
      images, labels, data::ImageDatasetOptions().mean(stats.mean).std(stats.std));
  cli::LoadedData loaded;
  loaded.classes = classes;
  loaded.in_channels = 1;
  loaded.train = train;
  loaded.test = train;
  return loaded;
}

/// The spec's JSON read back: spec_from_json's InputError (which must name `origin`).
std::string json_error(const json& spec) {
  const std::string message =
      testing::input_error_of([&] { cli::spec_from_json(spec, "model.json"); });
  EXPECT_EQ(message.rfind("model.json: model spec", 0), 0u) << message;
  return message;
}

TEST(ModelSpec, JsonRoundTripsForEveryKind) {
  for (const ModelKind kind :
       {ModelKind::kGpt, ModelKind::kMlp, ModelKind::kResnet, ModelKind::kBert}) {
    for (const bool float64 : {false, true}) {
      cli::ModelSpec spec = testing::small_spec(kind, nn::NormKind::kInstance);
      spec.float64 = float64;
      const json written = cli::spec_to_json(spec);
      EXPECT_EQ(cli::spec_to_json(cli::spec_from_json(written, "here")), written);
      EXPECT_EQ(cli::spec_to_json(cli::spec_from_json(json::parse(written.dump()), "here")),
                written);
    }
  }
}

TEST(ModelSpec, JsonLayout) {
  const json resnet = cli::spec_to_json(testing::small_spec(ModelKind::kResnet));
  EXPECT_EQ(resnet, json::parse(R"({
    "format": "bigbatch-model", "version": 1, "kind": "resnet", "dtype": "float32",
    "options": {"depth": 8, "width": 4, "norm": "batch", "in_channels": 3, "classes": 5},
    "input": {"type": "image", "channels": 3, "height": 8, "width": 8, "scale": 255,
              "mean": [0.5, 0.4, 0.3], "std": [0.25, 0.2, 0.3]},
    "classes": ["0", "1", "2", "3", "4"]})"));
  const json gpt = cli::spec_to_json(testing::small_spec(ModelKind::kGpt));
  EXPECT_EQ(gpt["options"], json::parse(R"({"vocab": 256, "context": 16, "layers": 2,
                                            "heads": 2, "embed": 16, "dropout": 0.0})"));
  EXPECT_EQ(gpt["input"], json::parse(R"({"type": "bytes", "context": 16})"));
  EXPECT_FALSE(gpt.contains("classes"));
  const json mlp = cli::spec_to_json(testing::small_spec(ModelKind::kMlp));
  EXPECT_EQ(mlp["options"], json::parse(R"({"vocab": 256, "context": 4, "embed": 8,
                                            "hidden": 16, "layers": 2, "dropout": 0.0})"));
  const json bert = cli::spec_to_json(testing::small_spec(ModelKind::kBert));
  EXPECT_EQ(bert["options"],
            json::parse(R"({"vocab": 257, "pad_id": 256, "context": 12, "layers": 2, "heads": 2,
                            "embed": 16, "classes": 3, "dropout": 0.1})"));
  EXPECT_EQ(bert["input"], json::parse(R"({"type": "bytes", "context": 12, "pad_id": 256})"));
  EXPECT_EQ(bert["classes"], json::parse(R"(["art", "law", "zippy"])"));
}

TEST(ModelSpec, JsonErrorsNameTheField) {
  const json good = cli::spec_to_json(testing::small_spec(ModelKind::kResnet));
  json spec = good;
  spec["options"].erase("width");
  EXPECT_NE(json_error(spec).find("model spec.options has no \"width\""), std::string::npos);
  spec = good;
  spec["options"]["width"] = "wide";
  EXPECT_NE(json_error(spec).find("model spec.options.width must be an integer, got \"wide\""),
            std::string::npos);
  spec = good;
  spec["kind"] = "vit";
  EXPECT_NE(json_error(spec).find(".kind must be one of gpt|mlp|resnet|bert, got \"vit\""),
            std::string::npos);
  spec = good;
  spec["dtype"] = "float16";
  EXPECT_NE(json_error(spec).find(".dtype must be \"float32\" or \"float64\""), std::string::npos);
  spec = good;
  spec["version"] = 2;
  EXPECT_NE(json_error(spec).find(".version 2 is not supported"), std::string::npos);
  spec = good;
  spec["classes"] = {"a", "b"};
  EXPECT_NE(json_error(spec).find(".classes has 2 names for 5 classes"), std::string::npos);
  spec = good;
  spec["input"]["mean"] = {0.1, 0.2};
  EXPECT_NE(json_error(spec).find("mean and std need 1 or 3 values, got 2"), std::string::npos);
  spec = good;
  spec["input"]["channels"] = 1;
  EXPECT_NE(json_error(spec).find("input.channels (1) differs from options.in_channels (3)"),
            std::string::npos);
  spec = good;
  spec["options"]["norm"] = "weight";
  EXPECT_NE(json_error(spec).find("options.norm must be one of batch|group|layer|instance"),
            std::string::npos);
  spec = cli::spec_to_json(testing::small_spec(ModelKind::kGpt));
  spec["options"]["heads"] = 3;
  EXPECT_NE(json_error(spec).find("GptOptions.embed (16) must be divisible by GptOptions.heads"),
            std::string::npos);
  spec = cli::spec_to_json(testing::small_spec(ModelKind::kBert));
  spec["input"]["context"] = 13;
  EXPECT_NE(json_error(spec).find("input.context (13) differs from options.context (12)"),
            std::string::npos);
  EXPECT_NE(json_error(json::array()).find("must be a JSON object"), std::string::npos);
}

TEST(ModelSpec, DescribesAResNetFromTheConfigAndTheData) {
  const cli::LoadedData data = image_data(3);
  const cli::TrainConfig config =
      config_with({"model.kind=resnet", "resnet.width=8", "model.norm_policy=group",
                   "model.dtype=float64", "data.train_images=/elsewhere/images.idx"});
  const cli::ModelSpec spec = cli::describe_model(config, data);
  EXPECT_EQ(spec.kind, ModelKind::kResnet);
  EXPECT_TRUE(spec.float64);
  EXPECT_EQ(spec.resnet.width(), 8);
  EXPECT_EQ(spec.resnet.classes(), 3);
  EXPECT_EQ(spec.resnet.norm(), nn::NormKind::kGroup);  // BatchNorm replaced
  EXPECT_EQ(spec.class_names, (std::vector<std::string>{"0", "1", "2"}));
  const auto* images = dynamic_cast<const data::ImageDataset*>(data.train.get());
  EXPECT_EQ(spec.image.channels, 1);
  EXPECT_EQ(spec.image.height, 6);
  EXPECT_EQ(spec.image.width, 6);
  EXPECT_EQ(spec.image.mean, images->options().mean());
  EXPECT_EQ(spec.image.std, images->options().std());
  // The JSON keeps the normalisation exactly.
  EXPECT_EQ(cli::spec_from_json(cli::spec_to_json(spec), "here").image.mean, spec.image.mean);
}

TEST(ModelSpec, DefaultFashionMnistGetsItsClassNames) {
  const cli::ModelSpec spec =
      cli::describe_model(config_with({"model.kind=resnet"}), image_data(10));
  EXPECT_EQ(spec.class_names, data::fashion_mnist_class_names());
  EXPECT_EQ(spec.class_names.front(), "T-shirt/top");
  EXPECT_EQ(spec.class_names.back(), "Ankle boot");
}

TEST(ModelSpec, DescribesABertWithTheCollectionNames) {
  std::vector<std::pair<std::string, std::string>> collections;
  for (const std::string name : {"zippy", "art", "law"}) {
    std::string text;
    for (int i = 0; i < 6; ++i)
      text += name + " fortune " + std::to_string(i) + "\n%\n";
    collections.emplace_back(name, text);
  }
  const auto fortunes = data::FortuneCollections::from_texts(
      collections, data::FortuneCollectionsOptions().min_per_class(1).max_bytes(32));
  cli::LoadedData data;
  data.classes = 3;
  data.train = fortunes.train_shared();
  data.test = fortunes.test_shared();
  const cli::ModelSpec spec =
      cli::describe_model(config_with({"model.kind=bert", "bert.context=32"}), data);
  EXPECT_EQ(spec.class_names, (std::vector<std::string>{"art", "law", "zippy"}));
  EXPECT_EQ(spec.bert.classes(), 3);
  EXPECT_EQ(spec.bert.context(), 32);
  EXPECT_EQ(spec.bert.pad_id(), data::kFortunePadId);
  EXPECT_EQ(spec.bert.vocab(), data::kFortunePadId + 1);
}

/// build_workload's module has the names, shapes and values of build_model(workload.spec) from
/// the same seed.
void expect_built_through_spec(const cli::TrainConfig& config, const cli::LoadedData& data) {
  torch::manual_seed(21);
  const cli::Workload w = cli::build_workload(config, data);
  torch::manual_seed(21);
  const cli::BuiltModel rebuilt = cli::build_model(w.spec);
  const auto expected = cli::state_tensors(*w.module);
  const auto found = cli::state_tensors(*rebuilt.module);
  ASSERT_EQ(found.size(), expected.size());
  for (size_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(found[i].first, expected[i].first);
    EXPECT_TRUE(torch::equal(found[i].second, expected[i].second)) << found[i].first;
  }
}

TEST(ModelSpec, BuildWorkloadBuildsTheSpecsModel) {
  const std::string corpus = small_corpus();
  cli::LoadedData text;
  text.corpus = std::make_shared<data::TextCorpus>(
      data::TextCorpus::from_bytes(std::vector<uint8_t>(corpus.begin(), corpus.end())));
  const cli::TrainConfig gpt =
      config_with({"gpt.layers=2", "gpt.embed=32", "gpt.checkpointing=blocks"});
  expect_built_through_spec(gpt, text);
  EXPECT_EQ(cli::build_workload(gpt, text).gpt->checkpointing().mode, nn::CheckpointMode::kBlocks);
  expect_built_through_spec(config_with({"model.kind=mlp", "model.dtype=float64"}), text);
  expect_built_through_spec(config_with({"model.kind=resnet", "model.norm_policy=ghost"}),
                            image_data(4));
  const cli::Workload group = cli::build_workload(
      config_with({"model.kind=resnet", "model.norm_policy=group"}), image_data(4));
  EXPECT_EQ(group.batch_norms, 0);
  EXPECT_NE(group.description.find("group norm (BatchNorm replaced"), std::string::npos);
}

}  // namespace
}  // namespace bigbatch
