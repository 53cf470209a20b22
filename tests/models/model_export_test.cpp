// cli/model_export: parameter and buffer names, the export's files, loading back bitwise, and the
// errors for files that do not fit the model.
#include "bigbatch/models/model_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/export_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using models::ModelKind;

std::vector<std::string> names_of(const std::vector<io::NamedTensor>& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors)
    names.push_back(name);
  return names;
}

class ModelExport : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  /// The export of a trained resnet, and its tensors.
  io::Safetensors exported_resnet(const std::string& out) {
    const models::ModelSpec spec = testing::small_spec(ModelKind::kResnet);
    models::export_model(*testing::trained_model(spec, 3).module, spec, out);
    return io::read_safetensors(out);
  }

  /// The InputError of loading `tensors` with the resnet's spec in the metadata, from a file
  /// whose name the message must carry.
  std::string load_error(std::vector<io::NamedTensor> tensors, const io::Safetensors& source) {
    const std::string file = path("broken.safetensors");
    io::write_safetensors(file, tensors, source.metadata);
    const std::string message = testing::input_error_of([&] { models::load_exported(file); });
    EXPECT_NE(message.find(file), std::string::npos) << message;
    return message;
  }

  testing::TempDir dir_;
};

TEST_F(ModelExport, StateTensorsHavePyTorchNamesInStateDictOrder) {
  torch::manual_seed(1);
  const models::BuiltModel gpt = models::build_model(testing::small_spec(ModelKind::kGpt));
  const std::vector<std::string> names = names_of(models::state_tensors(*gpt.module));
  const std::vector<std::string> first = {
      "tok_embed.weight",          "pos_embed.weight",         "blocks.0.ln1.weight",
      "blocks.0.ln1.bias",         "blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias",
      "blocks.0.attn.proj.weight", "blocks.0.attn.proj.bias",  "blocks.0.ln2.weight",
      "blocks.0.ln2.bias",         "blocks.0.mlp.fc.weight"};
  ASSERT_GE(names.size(), first.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + first.size()), first);
  EXPECT_EQ(names.back(), "head.weight");
  EXPECT_EQ(names.size(), gpt.module->parameters().size());

  const models::BuiltModel resnet = models::build_model(testing::small_spec(ModelKind::kResnet));
  const std::vector<std::string> resnet_names = names_of(models::state_tensors(*resnet.module));
  const std::vector<std::string> stem = {"stem_conv.weight",      "stem_norm.weight",
                                         "stem_norm.bias",        "stem_norm.running_mean",
                                         "stem_norm.running_var", "stem_norm.num_batches_tracked",
                                         "blocks.0.conv1.weight"};
  EXPECT_EQ(std::vector<std::string>(resnet_names.begin(), resnet_names.begin() + stem.size()),
            stem);
  EXPECT_EQ(resnet_names.size(),
            resnet.module->parameters().size() + resnet.module->buffers().size());

  const models::BuiltModel bert = models::build_model(testing::small_spec(ModelKind::kBert));
  EXPECT_EQ(names_of(models::state_tensors(*bert.module)).front(), "cls");
}

TEST_F(ModelExport, WritesWeightsBuffersAndTheSpecTwice) {
  const models::ModelSpec spec = testing::small_spec(ModelKind::kResnet);
  const models::BuiltModel model = testing::trained_model(spec, 3);
  const std::string out = path("model.safetensors");
  models::export_model(*model.module, spec, out);
  const io::Safetensors file = io::read_safetensors(out);
  EXPECT_EQ(names_of(file.tensors), names_of(models::state_tensors(*model.module)));
  const torch::Tensor* tracked = file.find("blocks.1.shortcut_norm.num_batches_tracked");
  ASSERT_NE(tracked, nullptr);
  EXPECT_EQ(tracked->scalar_type(), torch::kLong);
  EXPECT_EQ(tracked->item<int64_t>(), 2);  // two training steps
  const torch::Tensor* mean = file.find("stem_norm.running_mean");
  ASSERT_NE(mean, nullptr);
  EXPECT_GT(mean->abs().max().item<double>(), 0.0);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  const nlohmann::ordered_json spec_json = models::spec_to_json(spec);
  EXPECT_EQ(nlohmann::ordered_json::parse(file.metadata.at(models::kSpecMetadataKey)), spec_json);
  ASSERT_EQ(models::spec_path_for(out), path("model.json"));
  const std::string sidecar = testing::read_file(path("model.json"));
  EXPECT_EQ(nlohmann::ordered_json::parse(sidecar), spec_json);
  EXPECT_NE(sidecar.find("\n  \"kind\": \"resnet\""), std::string::npos) << sidecar;  // pretty
}

TEST_F(ModelExport, LoadsBackBitwiseInEvalModeWithoutTouchingTheGenerator) {
  for (const ModelKind kind :
       {ModelKind::kGpt, ModelKind::kMlp, ModelKind::kResnet, ModelKind::kBert}) {
    SCOPED_TRACE(models::to_string(kind));
    const models::ModelSpec spec = testing::small_spec(kind);
    const models::BuiltModel model = testing::trained_model(spec, 5);
    const std::string out = path(models::to_string(kind) + ".safetensors");
    models::export_model(*model.module, spec, out);
    torch::manual_seed(99);
    const torch::Tensor before = torch::rand({4});
    torch::manual_seed(99);
    const models::ExportedModel loaded = models::load_exported(out);
    EXPECT_TRUE(torch::equal(torch::rand({4}), before));
    EXPECT_FALSE(loaded.model.module->is_training());
    EXPECT_EQ(models::spec_to_json(loaded.spec), models::spec_to_json(spec));
    testing::expect_same_state(*loaded.model.module, *model.module);
    torch::NoGradGuard no_grad;
    const torch::Tensor inputs = testing::sample_inputs(spec, 3, 8);
    EXPECT_TRUE(torch::equal(loaded.model.forward(inputs), model.forward(inputs)));
  }
}

TEST_F(ModelExport, Float64ModelsExportFloat64AndKeepInt64Counters) {
  models::ModelSpec spec = testing::small_spec(ModelKind::kResnet);
  spec.float64 = true;
  const std::string out = path("resnet64.safetensors");
  models::export_model(*testing::trained_model(spec, 2).module, spec, out);
  const io::Safetensors file = io::read_safetensors(out);
  EXPECT_EQ(file.find("head.weight")->scalar_type(), torch::kFloat64);
  EXPECT_EQ(file.find("stem_norm.running_var")->scalar_type(), torch::kFloat64);
  EXPECT_EQ(file.find("stem_norm.num_batches_tracked")->scalar_type(), torch::kLong);
  EXPECT_EQ(models::load_exported(out).model.module->parameters()[0].scalar_type(),
            torch::kFloat64);
}

TEST_F(ModelExport, RefusesAModuleThatIsNotTheSpecsAndAJsonPath) {
  const models::ModelSpec spec = testing::small_spec(ModelKind::kGpt);
  models::ModelSpec wider = spec;
  wider.gpt.embed(32);
  const models::BuiltModel model = models::build_model(wider);
  std::string message = testing::input_error_of(
      [&] { models::export_model(*model.module, spec, path("m.safetensors")); });
  EXPECT_NE(message.find("tensor \"tok_embed.weight\" has shape [256, 32], the gpt model needs "
                         "[256, 16]"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(path("m.safetensors")));
  message = testing::input_error_of(
      [&] { models::export_model(*model.module, wider, path("model.json")); });
  EXPECT_NE(message.find("ends in .json"), std::string::npos) << message;
}

TEST_F(ModelExport, MissingExtraMisshapedAndMistypedTensorsAreNamed) {
  const io::Safetensors file = exported_resnet(path("model.safetensors"));
  std::vector<io::NamedTensor> tensors = file.tensors;

  std::vector<io::NamedTensor> missing = tensors;
  missing.erase(missing.begin() + 3);  // stem_norm.running_mean
  std::string message = load_error(missing, file);
  EXPECT_NE(message.find("1 tensor(s) the resnet model needs are missing: "
                         "\"stem_norm.running_mean\""),
            std::string::npos)
      << message;

  std::vector<io::NamedTensor> extra = tensors;
  extra.emplace_back("head.scale", torch::ones({1}));
  message = load_error(extra, file);
  EXPECT_NE(message.find("1 tensor(s) are not in the resnet model: \"head.scale\""),
            std::string::npos)
      << message;

  std::vector<io::NamedTensor> misshaped = tensors;
  misshaped[0].second = torch::zeros({4, 3, 3});
  message = load_error(misshaped, file);
  EXPECT_NE(message.find("tensor \"stem_conv.weight\" has shape [4, 3, 3], the resnet model "
                         "needs [4, 3, 3, 3]"),
            std::string::npos)
      << message;

  std::vector<io::NamedTensor> mistyped = tensors;
  mistyped[0].second = mistyped[0].second.to(torch::kFloat64);
  message = load_error(mistyped, file);
  EXPECT_NE(message.find("tensor \"stem_conv.weight\" has dtype double, the resnet model needs "
                         "float"),
            std::string::npos)
      << message;
}

TEST_F(ModelExport, FilesWithoutAValidSpecAreNotExports) {
  const io::Safetensors file = exported_resnet(path("model.safetensors"));
  const std::string plain = path("plain.safetensors");
  io::write_safetensors(plain, file.tensors, {{"format", "pt"}});
  std::string message = testing::input_error_of([&] { models::load_exported(plain); });
  EXPECT_NE(message.find(plain + ": not a bigbatch export"), std::string::npos) << message;

  const std::string garbled = path("garbled.safetensors");
  io::write_safetensors(garbled, file.tensors, {{models::kSpecMetadataKey, "{\"kind\": "}});
  message = testing::input_error_of([&] { models::load_exported(garbled); });
  EXPECT_NE(message.find(garbled + ": the model spec in the metadata is not valid JSON"),
            std::string::npos)
      << message;

  nlohmann::ordered_json spec =
      nlohmann::ordered_json::parse(file.metadata.at(models::kSpecMetadataKey));
  spec["options"]["depth"] = 9;
  const std::string invalid = path("invalid.safetensors");
  io::write_safetensors(invalid, file.tensors, {{models::kSpecMetadataKey, spec.dump()}});
  message = testing::input_error_of([&] { models::load_exported(invalid); });
  EXPECT_NE(message.find(invalid + ": model spec.options: ResNetOptions.depth must be 6n + 2"),
            std::string::npos)
      << message;
}

TEST_F(ModelExport, LoadWeightsSetsEveryTensorOfAFreshModelFromAnExportOrAStateDict) {
  const models::ModelSpec spec = testing::small_spec(ModelKind::kResnet);
  const models::BuiltModel trained = testing::trained_model(spec, 3);
  const io::Safetensors file = exported_resnet(path("model.safetensors"));
  // A state_dict saved by safetensors: the tensors alone, no spec; floats in float64.
  std::vector<io::NamedTensor> widened = file.tensors;
  for (auto& [name, tensor] : widened)
    if (tensor.is_floating_point())
      tensor = tensor.to(torch::kFloat64);
  const std::string state_dict = path("state_dict.safetensors");
  io::write_safetensors(state_dict, widened, {{"format", "pt"}});
  for (const std::string& source : {path("model.safetensors"), state_dict}) {
    torch::manual_seed(99);
    const models::BuiltModel fresh = models::build_model(spec);
    models::load_weights(*fresh.module, source, "resnet model");
    SCOPED_TRACE(source);
    testing::expect_same_state(*fresh.module, *trained.module);
  }
}

TEST_F(ModelExport, LoadWeightsCopiesNothingFromAFileThatDoesNotFit) {
  const models::ModelSpec spec = testing::small_spec(ModelKind::kResnet);
  const io::Safetensors file = exported_resnet(path("model.safetensors"));
  std::vector<io::NamedTensor> tensors = file.tensors;
  tensors.erase(tensors.begin() + 3);  // stem_norm.running_mean
  const std::string broken = path("broken.safetensors");
  io::write_safetensors(broken, tensors, {{"format", "pt"}});
  torch::manual_seed(5);
  const models::BuiltModel fresh = models::build_model(spec);
  const torch::Tensor before = fresh.module->named_parameters()["stem_conv.weight"].clone();
  std::string message =
      testing::input_error_of([&] { models::load_weights(*fresh.module, broken, "resnet model"); });
  EXPECT_NE(message.find(broken + ": 1 tensor(s) the resnet model needs are missing: "
                                  "\"stem_norm.running_mean\""),
            std::string::npos)
      << message;
  EXPECT_TRUE(torch::equal(fresh.module->named_parameters()["stem_conv.weight"], before));
  // Counters are not floats: their dtype must be the model's.
  tensors = file.tensors;
  for (auto& [name, tensor] : tensors)
    if (name == "stem_norm.num_batches_tracked")
      tensor = tensor.to(torch::kFloat32);
  io::write_safetensors(broken, tensors, {{"format", "pt"}});
  message =
      testing::input_error_of([&] { models::load_weights(*fresh.module, broken, "resnet model"); });
  EXPECT_NE(message.find("has dtype float, the resnet model needs long"), std::string::npos)
      << message;
  EXPECT_TRUE(torch::equal(fresh.module->named_parameters()["stem_conv.weight"], before));
  message = testing::input_error_of(
      [&] { models::load_weights(*fresh.module, path("absent.safetensors")); });
  EXPECT_NE(message.find(path("absent.safetensors")), std::string::npos) << message;
}

TEST_F(ModelExport, LoadWeightsFillsAnyModuleFromItsStateDict) {
  torch::manual_seed(3);
  torch::nn::Sequential source(torch::nn::Linear(3, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
  const std::string file = path("mine.safetensors");
  io::write_safetensors(file, models::state_tensors(*source), {{"format", "pt"}});
  torch::manual_seed(4);
  torch::nn::Sequential mine(torch::nn::Linear(3, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
  models::load_weights(*mine, file);
  EXPECT_TRUE(
      torch::equal(mine->named_parameters()["2.weight"], source->named_parameters()["2.weight"]));
  torch::nn::Sequential other(torch::nn::Linear(3, 5));
  const std::string message = testing::input_error_of([&] { models::load_weights(*other, file); });
  EXPECT_NE(message.find(file + ": tensor \"0.weight\" has shape [4, 3], the model needs [5, 3]"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace bigbatch
