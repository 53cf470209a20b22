// models/model_spec: the spec's JSON (layout, round trip, errors).
#include "bigbatch/models/model_spec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bigbatch/models/model_export.h"
#include "support/export_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using models::ModelKind;
using json = nlohmann::ordered_json;

/// The spec's JSON read back: spec_from_json's InputError (which must name `origin`).
std::string json_error(const json& spec) {
  const std::string message =
      testing::input_error_of([&] { models::spec_from_json(spec, "model.json"); });
  EXPECT_EQ(message.rfind("model.json: model spec", 0), 0u) << message;
  return message;
}

TEST(ModelSpec, JsonRoundTripsForEveryKind) {
  for (const ModelKind kind :
       {ModelKind::kGpt, ModelKind::kMlp, ModelKind::kResnet, ModelKind::kBert}) {
    for (const bool float64 : {false, true}) {
      models::ModelSpec spec = testing::small_spec(kind, nn::NormKind::kInstance);
      spec.float64 = float64;
      const json written = models::spec_to_json(spec);
      EXPECT_EQ(models::spec_to_json(models::spec_from_json(written, "here")), written);
      EXPECT_EQ(models::spec_to_json(models::spec_from_json(json::parse(written.dump()), "here")),
                written);
    }
  }
}

TEST(ModelSpec, JsonLayout) {
  const json resnet = models::spec_to_json(testing::small_spec(ModelKind::kResnet));
  EXPECT_EQ(resnet, json::parse(R"({
    "format": "bigbatch-model", "version": 1, "kind": "resnet", "dtype": "float32",
    "options": {"depth": 8, "width": 4, "norm": "batch", "in_channels": 3, "classes": 5},
    "input": {"type": "image", "channels": 3, "height": 8, "width": 8, "scale": 255,
              "mean": [0.5, 0.4, 0.3], "std": [0.25, 0.2, 0.3]},
    "classes": ["0", "1", "2", "3", "4"]})"));
  const json gpt = models::spec_to_json(testing::small_spec(ModelKind::kGpt));
  EXPECT_EQ(gpt["options"], json::parse(R"({"vocab": 256, "context": 16, "layers": 2,
                                            "heads": 2, "embed": 16, "dropout": 0.0})"));
  EXPECT_EQ(gpt["input"], json::parse(R"({"type": "bytes", "context": 16})"));
  EXPECT_FALSE(gpt.contains("classes"));
  const json mlp = models::spec_to_json(testing::small_spec(ModelKind::kMlp));
  EXPECT_EQ(mlp["options"], json::parse(R"({"vocab": 256, "context": 4, "embed": 8,
                                            "hidden": 16, "layers": 2, "dropout": 0.0})"));
  const json bert = models::spec_to_json(testing::small_spec(ModelKind::kBert));
  EXPECT_EQ(bert["options"],
            json::parse(R"({"vocab": 257, "pad_id": 256, "context": 12, "layers": 2, "heads": 2,
                            "embed": 16, "classes": 3, "dropout": 0.1})"));
  EXPECT_EQ(bert["input"], json::parse(R"({"type": "bytes", "context": 12, "pad_id": 256})"));
  EXPECT_EQ(bert["classes"], json::parse(R"(["art", "law", "zippy"])"));
}

TEST(ModelSpec, JsonErrorsNameTheField) {
  const json good = models::spec_to_json(testing::small_spec(ModelKind::kResnet));
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
  spec = models::spec_to_json(testing::small_spec(ModelKind::kGpt));
  spec["options"]["heads"] = 3;
  EXPECT_NE(json_error(spec).find("GptOptions.embed (16) must be divisible by GptOptions.heads"),
            std::string::npos);
  spec = models::spec_to_json(testing::small_spec(ModelKind::kBert));
  spec["input"]["context"] = 13;
  EXPECT_NE(json_error(spec).find("input.context (13) differs from options.context (12)"),
            std::string::npos);
  EXPECT_NE(json_error(json::array()).find("must be a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace bigbatch
