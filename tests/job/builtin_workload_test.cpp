// job/builtin_workload: what describe_model takes from the options and the data, and
// build_builtin_workload building exactly build_model(spec).
#include "bigbatch/job/builtin_workload.h"

#include <gtest/gtest.h>

#include "bigbatch/cli/train_command.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/nn/norm.h"
#include "cli/cli_support.h"
#include "support/export_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using models::ModelKind;

cli::TrainConfig config_with(const std::vector<std::string>& overrides) {
  cli::TrainCommandOptions options;
  options.overrides = overrides;
  return cli::load_config(options);
}

/// Loaded resnet data: `classes` classes of random 1x6x6 images, normalised with their stats.
job::LoadedData image_data(int64_t classes) {
  torch::manual_seed(4);
  const torch::Tensor images = torch::randint(0, 256, {4 * classes, 6, 6}, torch::kByte);
  const torch::Tensor labels = torch::arange(4 * classes, torch::kLong) % classes;
  const data::PixelStats stats = data::ImageDataset::pixel_stats(images);
  auto train = std::make_shared<data::ImageDataset>(
      images, labels, data::ImageDatasetOptions().mean(stats.mean).std(stats.std));
  job::LoadedData loaded;
  loaded.classes = classes;
  loaded.in_channels = 1;
  for (int64_t c = 0; c < classes; ++c)
    loaded.class_names.push_back(std::to_string(c));
  loaded.train = train;
  loaded.test = train;
  return loaded;
}

TEST(BuiltinWorkload, DescribesAResNetFromTheConfigAndTheData) {
  const job::LoadedData data = image_data(3);
  const cli::TrainConfig config =
      config_with({"model.kind=resnet", "resnet.width=8", "model.norm_policy=group",
                   "model.dtype=float64", "data.train_images=/elsewhere/images.idx"});
  const models::ModelSpec spec = job::describe_model(config.model, data);
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
  EXPECT_EQ(models::spec_from_json(models::spec_to_json(spec), "here").image.mean, spec.image.mean);
}

TEST(BuiltinWorkload, DefaultFashionMnistGetsItsClassNames) {
  const cli::TrainConfig config = config_with({"model.kind=resnet", "data.subsample=40"});
  const job::LoadedData data = job::load_builtin_data(config.model.kind, config.data);
  EXPECT_EQ(data.class_names, data::fashion_mnist_class_names());
  const models::ModelSpec spec = job::describe_model(config.model, data);
  EXPECT_EQ(spec.class_names, data::fashion_mnist_class_names());
  EXPECT_EQ(spec.class_names.front(), "T-shirt/top");
  EXPECT_EQ(spec.class_names.back(), "Ankle boot");
}

TEST(BuiltinWorkload, DescribesABertWithTheCollectionNames) {
  std::vector<std::pair<std::string, std::string>> collections;
  for (const std::string name : {"zippy", "art", "law"}) {
    std::string text;
    for (int i = 0; i < 6; ++i)
      text += name + " fortune " + std::to_string(i) + "\n%\n";
    collections.emplace_back(name, text);
  }
  const auto fortunes = data::FortuneCollections::from_texts(
      collections, data::FortuneCollectionsOptions().min_per_class(1).max_bytes(32));
  job::LoadedData data;
  data.classes = 3;
  data.class_names = fortunes.class_names();
  data.train = fortunes.train_shared();
  data.test = fortunes.test_shared();
  const models::ModelSpec spec =
      job::describe_model(config_with({"model.kind=bert", "bert.context=32"}).model, data);
  EXPECT_EQ(spec.class_names, (std::vector<std::string>{"art", "law", "zippy"}));
  EXPECT_EQ(spec.bert.classes(), 3);
  EXPECT_EQ(spec.bert.context(), 32);
  EXPECT_EQ(spec.bert.pad_id(), data::kFortunePadId);
  EXPECT_EQ(spec.bert.vocab(), data::kFortunePadId + 1);
}

/// build_builtin_workload's module has the names, shapes and values of build_model of the
/// workload's spec from the same seed.
void expect_built_through_spec(const cli::TrainConfig& config, const job::LoadedData& data) {
  torch::manual_seed(21);
  const job::Workload w = job::build_builtin_workload(config.model, data, job::PassSite());
  torch::manual_seed(21);
  const models::BuiltModel rebuilt =
      models::build_model(models::spec_from_json(w.model_spec, "the workload"));
  testing::expect_same_state(*rebuilt.module, *w.module);
}

TEST(BuiltinWorkload, BuildsTheSpecsModel) {
  const std::string corpus = small_corpus();
  job::LoadedData text;
  text.corpus = std::make_shared<data::TextCorpus>(
      data::TextCorpus::from_bytes(std::vector<uint8_t>(corpus.begin(), corpus.end())));
  const cli::TrainConfig gpt =
      config_with({"gpt.layers=2", "gpt.embed=32", "gpt.checkpointing=blocks"});
  expect_built_through_spec(gpt, text);
  const job::Workload gpt_workload = job::build_builtin_workload(gpt.model, text, job::PassSite());
  EXPECT_EQ(std::dynamic_pointer_cast<models::GptImpl>(gpt_workload.module)->checkpointing().mode,
            nn::CheckpointMode::kBlocks);
  expect_built_through_spec(config_with({"model.kind=mlp", "model.dtype=float64"}), text);
  expect_built_through_spec(config_with({"model.kind=resnet", "model.norm_policy=ghost"}),
                            image_data(4));
  const job::Workload group = job::build_builtin_workload(
      config_with({"model.kind=resnet", "model.norm_policy=group"}).model, image_data(4),
      job::PassSite());
  EXPECT_EQ(nn::count_batch_norms(*group.module), 0);
  EXPECT_NE(group.description.find("group norm (BatchNorm replaced"), std::string::npos);
  // What concurrent passes need, and how large a pass is: GroupNorm allows them; a 6 x 6 image
  // spans 36 positions.
  EXPECT_EQ(group.concurrency_need, "");
  EXPECT_EQ(group.positions_per_sample, 36);
  // BatchNorm allows them where its fused kernel writes the statistics (CPU float32 or bf16
  // autocast) or they are per window (ghost); elsewhere ATen's kernel writes them mid-forward.
  const job::BuiltinModelOptions resnet = config_with({"model.kind=resnet"}).model;
  EXPECT_EQ(job::build_builtin_workload(resnet, image_data(4), job::PassSite()).concurrency_need,
            "");
  EXPECT_EQ(job::build_builtin_workload(resnet, image_data(4),
                                        job::PassSite{nn::Precision::kBf16, c10::kCPU})
                .concurrency_need,
            "");
  const std::string float64 = job::concurrency_need(
      config_with({"model.kind=resnet", "model.dtype=float64"}).model, job::PassSite());
  EXPECT_NE(float64.find("BatchNorm on its fused kernel"), std::string::npos) << float64;
  EXPECT_NE(float64.find("this ResNet runs fp32 in float64 on cpu"), std::string::npos) << float64;
  EXPECT_NE(job::concurrency_need(resnet, job::PassSite{nn::Precision::kBf16, c10::kCUDA})
                .find("bf16 on cuda"),
            std::string::npos);
  EXPECT_EQ(
      job::concurrency_need(config_with({"model.kind=resnet", "model.norm_policy=ghost"}).model,
                            job::PassSite{nn::Precision::kBf16, c10::kCPU}),
      "");
  EXPECT_EQ(gpt_workload.positions_per_sample, 0);  // its attention_keys count instead
}

TEST(BuiltinWorkload, StartsFromTheWeightsOfInitFromWhateverTheSeed) {
  testing::TempDir dir;
  const std::string corpus = small_corpus();
  job::LoadedData text;
  text.corpus = std::make_shared<data::TextCorpus>(
      data::TextCorpus::from_bytes(std::vector<uint8_t>(corpus.begin(), corpus.end())));
  cli::TrainConfig config = config_with({"gpt.layers=2", "gpt.embed=32"});
  torch::manual_seed(1);
  const job::Workload source = job::build_builtin_workload(config.model, text, job::PassSite());
  const std::string file = (dir.path() / "init.safetensors").string();
  models::export_model(*source.module, models::spec_from_json(source.model_spec, "the workload"),
                       file);

  config.model.init_from = file;
  torch::manual_seed(2);
  const job::Workload started = job::build_builtin_workload(config.model, text, job::PassSite());
  testing::expect_same_state(*started.module, *source.module);
  // The generator moved on as a fresh initialisation would move it (dropout draws the same).
  const torch::Tensor after_init_from = torch::rand({4});
  torch::manual_seed(2);
  job::build_builtin_workload(config_with({"gpt.layers=2", "gpt.embed=32"}).model, text,
                              job::PassSite());
  EXPECT_TRUE(torch::equal(torch::rand({4}), after_init_from));

  // A file of another architecture names what does not fit.
  config.model.gpt.embed(16);
  const std::string message = testing::input_error_of(
      [&] { job::build_builtin_workload(config.model, text, job::PassSite()); });
  EXPECT_NE(message.find(file + ": tensor \"tok_embed.weight\" has shape [256, 32], the gpt "
                                "model needs [256, 16]"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace bigbatch
