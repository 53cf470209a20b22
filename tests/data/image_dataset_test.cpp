#include "bigbatch/data/image_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/data/idx.h"
#include "support/gzip.h"
#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using bigbatch::testing::gzip;
using bigbatch::testing::input_error_of;
using bigbatch::testing::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

/// (4, 2, 3) uint8 images with distinct pixels, 0..235 in steps of 10.
torch::Tensor four_images() {
  return torch::arange(24, torch::kByte).mul_(10).reshape({4, 2, 3});
}

TEST(ImageDataset, GetScalesToUnitRangeAndNormalises) {
  const torch::Tensor images = four_images();
  const torch::Tensor labels = torch::tensor({2, 0, 1, 2}, torch::kByte);
  const ImageDataset plain(images, labels);
  EXPECT_EQ(plain.size(), 4);
  EXPECT_EQ(plain.num_classes(), 3);
  EXPECT_EQ(plain.images().sizes(), (std::vector<int64_t>{4, 1, 2, 3}));
  const Batch batch = plain.get({3, 0, 3});
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat);
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{3, 1, 2, 3}));
  EXPECT_EQ(batch.targets.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(batch.targets, torch::tensor({2, 2, 2}, torch::kLong)));
  const torch::Tensor expected =
      images.index_select(0, torch::tensor({3, 0, 3})).to(torch::kFloat).div(255.0).unsqueeze(1);
  EXPECT_TRUE(torch::allclose(batch.inputs, expected, 0, 1e-7));
  EXPECT_FLOAT_EQ(batch.inputs[1][0][0][1].item<float>(), 10.0f / 255.0f);

  const ImageDataset normalised(images, labels, ImageDatasetOptions().mean({0.5}).std({0.25}));
  const Batch scaled = normalised.get({3, 0, 3});
  EXPECT_TRUE(torch::allclose(scaled.inputs, (expected - 0.5) / 0.25, 0, 1e-6));
}

TEST(ImageDataset, ChannelsFirstImagesWithPerChannelMeanAndStd) {
  // (N=2, C=3, H=1, W=2): channel c of image n holds 100*n + 10*c and that + 5.
  torch::Tensor images = torch::empty({2, 3, 1, 2}, torch::kByte);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c) {
      images[n][c][0][0] = 100 * n + 10 * c;
      images[n][c][0][1] = 100 * n + 10 * c + 5;
    }
  const ImageDataset dataset(images, torch::tensor({1, 0}, torch::kLong),
                             ImageDatasetOptions().mean({0.1, 0.2, 0.3}).std({1.0, 2.0, 4.0}));
  const Batch batch = dataset.get({1});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{1, 3, 1, 2}));
  for (int64_t c = 0; c < 3; ++c) {
    const double mean = 0.1 * (c + 1);
    const double std = c == 0 ? 1.0 : c == 1 ? 2.0 : 4.0;
    EXPECT_NEAR(batch.inputs[0][c][0][0].item<double>(), ((100 + 10 * c) / 255.0 - mean) / std,
                1e-6);
    EXPECT_NEAR(batch.inputs[0][c][0][1].item<double>(), ((105 + 10 * c) / 255.0 - mean) / std,
                1e-6);
  }
  EXPECT_EQ(dataset.describe(), "2 images 3x1x2, 2 classes");
}

TEST(ImageDataset, NumberOfClassesFromLabelsOptionOrNames) {
  const torch::Tensor images = four_images();
  const torch::Tensor labels = torch::tensor({0, 1, 1, 0}, torch::kLong);
  EXPECT_EQ(ImageDataset(images, labels).num_classes(), 2);
  EXPECT_EQ(ImageDataset(images, labels).describe(), "4 images 1x2x3, 2 classes");
  EXPECT_EQ(ImageDataset(images, labels, ImageDatasetOptions().num_classes(10)).num_classes(), 10);
  const ImageDataset named(images, labels, ImageDatasetOptions().class_names({"a", "b", "c"}));
  EXPECT_EQ(named.num_classes(), 3);
  EXPECT_EQ(named.class_names(), (std::vector<std::string>{"a", "b", "c"}));

  const std::string above = input_error_of(
      [&] { ImageDataset(images, labels, ImageDatasetOptions().num_classes(1).name("toy")); });
  EXPECT_THAT(above, HasSubstr("toy has label 1 at index 1; expected labels in [0, 1)"));
  const std::string negative = input_error_of([&] {
    ImageDataset(images, torch::tensor({0, -3, 1, 0}, torch::kLong));
  });
  EXPECT_THAT(negative, HasSubstr("label -3 at index 1"));
  const std::string names = input_error_of([&] {
    ImageDataset(images, labels, ImageDatasetOptions().num_classes(3).class_names({"a", "b"}));
  });
  EXPECT_THAT(names, HasSubstr("2 class names given for num_classes 3"));
}

TEST(ImageDataset, BadTensorsAndOptionsAreInputErrorsNamingTheValue) {
  const torch::Tensor images = four_images();
  const torch::Tensor labels = torch::tensor({0, 1, 1, 0}, torch::kByte);
  const auto options = ImageDatasetOptions().name("toy");
  EXPECT_THAT(input_error_of([&] { ImageDataset(images.to(torch::kFloat), labels, options); }),
              HasSubstr("toy: images must be uint8, got Float"));
  EXPECT_THAT(input_error_of([&] {
                ImageDataset(images.reshape({4, 6}), labels, options);
              }),
              HasSubstr("got shape 4x6"));
  EXPECT_THAT(input_error_of([&] { ImageDataset(images, labels.to(torch::kFloat), options); }),
              HasSubstr("labels must be uint8 or int64, got Float"));
  EXPECT_THAT(input_error_of([&] { ImageDataset(images, labels.slice(0, 0, 3), options); }),
              HasSubstr("toy: 3 labels for 4 images"));
  EXPECT_THAT(
      input_error_of([&] { ImageDataset(images.slice(0, 0, 0), labels.slice(0, 0, 0), options); }),
      HasSubstr("toy: no images"));
  EXPECT_THAT(input_error_of([&] {
                ImageDataset(images, labels, ImageDatasetOptions(options).mean({0.1, 0.2}));
              }),
              HasSubstr("mean must have 1 value or one per channel (1), got 2"));
  EXPECT_THAT(input_error_of(
                  [&] { ImageDataset(images, labels, ImageDatasetOptions(options).std({0.0})); }),
              HasSubstr("std values must be > 0, got 0"));
  EXPECT_THAT(input_error_of(
                  [&] { ImageDataset(images, labels, ImageDatasetOptions(options).subsample(5)); }),
              HasSubstr("subsample must be in [0, 4], got 5"));
}

TEST(ImageDataset, IndexOutsideTheDatasetIsALogicError) {
  const ImageDataset dataset(four_images(), torch::tensor({0, 1, 1, 0}, torch::kByte));
  EXPECT_THROW(dataset.get({0, 4}), std::logic_error);
  EXPECT_THROW(dataset.get({-1}), std::logic_error);
}

TEST(ImageDataset, SubsampleIsASeededSubsetInOriginalOrder) {
  const int64_t n = 100;
  // Image i is filled with i, label i % 7, so rows can be traced.
  const torch::Tensor images =
      torch::arange(n, torch::kByte).view({n, 1, 1}).expand({n, 2, 2}).contiguous();
  const torch::Tensor labels = torch::arange(n, torch::kLong).remainder(7);
  const auto pick = [&](uint64_t seed) {
    const ImageDataset dataset(images, labels,
                               ImageDatasetOptions().subsample(10).subsample_seed(seed));
    EXPECT_EQ(dataset.size(), 10);
    EXPECT_EQ(dataset.num_classes(), 7);  // decided on all 100 labels
    const torch::Tensor rows = dataset.images().select(1, 0).select(1, 0).select(1, 0);
    EXPECT_TRUE(torch::equal(dataset.labels(), rows.to(torch::kLong).remainder(7)));
    const torch::Tensor ids = rows.to(torch::kLong);
    EXPECT_TRUE(torch::equal(ids, std::get<0>(ids.sort())));  // original order kept
    EXPECT_EQ(std::get<0>(at::_unique(ids)).numel(), 10);     // no repeats
    return ids;
  };
  EXPECT_TRUE(torch::equal(pick(1), pick(1)));
  EXPECT_FALSE(torch::equal(pick(1), pick(2)));
  // subsample 0 and subsample N keep everything.
  EXPECT_EQ(ImageDataset(images, labels, ImageDatasetOptions().subsample(n)).size(), n);
  EXPECT_TRUE(torch::equal(ImageDataset(images, labels).labels(), labels));
}

TEST(ImageDataset, PixelStatsAreExact) {
  // Channel 0 holds 0 and 255 equally: mean 0.5, std 0.5. Channel 1 is constant 51: 0.2, 0.
  torch::Tensor images = torch::empty({2, 2, 2, 2}, torch::kByte);
  images.select(1, 0).copy_(torch::tensor({0, 255, 255, 0, 0, 0, 255, 255}).view({2, 2, 2}));
  images.select(1, 1).fill_(51);
  const PixelStats stats = ImageDataset::pixel_stats(images);
  ASSERT_EQ(stats.mean.size(), 2u);
  EXPECT_DOUBLE_EQ(stats.mean[0], 0.5);
  EXPECT_DOUBLE_EQ(stats.std[0], 0.5);
  EXPECT_DOUBLE_EQ(stats.mean[1], 0.2);
  EXPECT_NEAR(stats.std[1], 0.0, 1e-15);
  // Against torch in float64 on random bytes, (N, H, W) input.
  torch::manual_seed(0);
  const torch::Tensor random = torch::randint(0, 256, {50, 7, 9}, torch::kByte);
  const PixelStats one = ImageDataset(random, torch::zeros({50}, torch::kLong)).pixel_stats();
  const torch::Tensor scaled = random.to(torch::kDouble) / 255.0;
  EXPECT_NEAR(one.mean[0], scaled.mean().item<double>(), 1e-12);
  EXPECT_NEAR(one.std[0], scaled.std(/*unbiased=*/false).item<double>(), 1e-12);
}

/// Writes images (gzip) and labels (raw) IDX files into `dir`.
IdxPaths write_pair(const TempDir& dir, const torch::Tensor& images, const torch::Tensor& labels) {
  return {dir.write("images-idx3-ubyte.gz", gzip(idx_bytes(images))).string(),
          dir.write("labels-idx1-ubyte", idx_bytes(labels)).string()};
}

TEST(ImageDataset, LoadIdxClassificationReadsAnyPairOfFiles) {
  TempDir dir;
  const torch::Tensor images = four_images();
  const torch::Tensor labels = torch::tensor({3, 1, 0, 2}, torch::kByte);
  const IdxPaths paths = write_pair(dir, images, labels);
  const ImageDataset dataset = load_idx_classification(paths.images, paths.labels);
  EXPECT_EQ(dataset.describe(), "4 images 1x2x3, 4 classes");
  EXPECT_EQ(dataset.options().name(), paths.images);
  EXPECT_TRUE(torch::equal(dataset.images().squeeze(1), images));
  EXPECT_TRUE(torch::equal(dataset.labels(), labels.to(torch::kLong)));
  const Batch batch = dataset.get({2});
  EXPECT_EQ(batch.targets.item<int64_t>(), 0);
  // Four-dimensional images keep their channels.
  const IdxPaths rgb =
      write_pair(dir, images.view({4, 1, 2, 3}).expand({4, 3, 2, 3}).contiguous(), labels);
  EXPECT_EQ(load_idx_classification(rgb.images, rgb.labels).describe(),
            "4 images 3x2x3, 4 classes");
}

TEST(ImageDataset, LabelCountMismatchNamesBothFilesAndCounts) {
  TempDir dir;
  const IdxPaths paths = write_pair(dir, four_images(), torch::tensor({0, 1, 2}, torch::kByte));
  const std::string message =
      input_error_of([&] { load_idx_classification(paths.images, paths.labels); });
  EXPECT_THAT(message, HasSubstr("labels file '" + paths.labels + "' has 3 labels"));
  EXPECT_THAT(message, HasSubstr("images file '" + paths.images + "' has 4 images"));
}

TEST(ImageDataset, LoadChecksRanksAndLabelRangeNamingTheFile) {
  TempDir dir;
  const IdxPaths paths = write_pair(dir, four_images(), torch::tensor({0, 1, 9, 2}, torch::kByte));
  const std::string range = input_error_of([&] {
    load_idx_classification(paths.images, paths.labels, ImageDatasetOptions().num_classes(5));
  });
  EXPECT_THAT(range, HasSubstr("labels file '" + paths.labels + "' has label 9 at index 2"));
  EXPECT_THAT(range, HasSubstr("[0, 5)"));
  // Swapped files: the labels file has rank 3.
  const std::string swapped =
      input_error_of([&] { load_idx_classification(paths.labels, paths.images); });
  EXPECT_THAT(swapped, HasSubstr("labels file '" + paths.images + "' has rank 3 (shape 4x2x3)"));
  const std::string flat = input_error_of([&] {
    const fs::path vector = dir.write("flat", idx_bytes(torch::zeros({4}, torch::kByte)));
    load_idx_classification(vector.string(), paths.labels);
  });
  EXPECT_THAT(flat, HasSubstr("has rank 1 (shape 4); expected rank 3"));
  // Read errors name the file.
  const std::string missing = (dir.path() / "missing.gz").string();
  EXPECT_THAT(input_error_of([&] { load_idx_classification(missing, paths.labels); }),
              HasSubstr(missing));
}

TEST(ImageDataset, FashionMnistPathsAndClassNames) {
  EXPECT_STREQ(kFashionMnistDirectory, "/usr/share/datasets/fashion-mnist");
  const IdxPaths train = fashion_mnist_paths("/data/fm", "train");
  EXPECT_EQ(train.images, "/data/fm/train-images-idx3-ubyte.gz");
  EXPECT_EQ(train.labels, "/data/fm/train-labels-idx1-ubyte.gz");
  const IdxPaths test = fashion_mnist_paths("/data/fm/", "test");
  EXPECT_EQ(test.images, "/data/fm/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(test.labels, "/data/fm/t10k-labels-idx1-ubyte.gz");
  EXPECT_THAT(input_error_of([] { fashion_mnist_paths("/data/fm", "val"); }),
              HasSubstr("split must be 'train' or 'test', got 'val'"));
  const std::vector<std::string>& names = fashion_mnist_class_names();
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names.front(), "T-shirt/top");
  EXPECT_EQ(names[4], "Coat");
  EXPECT_EQ(names.back(), "Ankle boot");
}

TEST(ImageDataset, RealFashionMnist) {
  const IdxPaths train_paths = fashion_mnist_paths(kFashionMnistDirectory, "train");
  const IdxPaths test_paths = fashion_mnist_paths(kFashionMnistDirectory, "test");
  if (!fs::exists(train_paths.images) || !fs::exists(test_paths.labels))
    GTEST_SKIP() << "Fashion-MNIST not installed: apt-get install dataset-fashion-mnist";
  const auto options = ImageDatasetOptions().class_names(fashion_mnist_class_names());
  const auto start = std::chrono::steady_clock::now();
  const ImageDataset train = load_idx_classification(train_paths.images, train_paths.labels,
                                                     ImageDatasetOptions(options).name("train"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "load_idx_classification Fashion-MNIST train: " << seconds << " s\n";
  EXPECT_EQ(train.describe(), "60,000 images 1x28x28, 10 classes");
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.labels().min().item<int64_t>(), 0);
  EXPECT_EQ(train.labels().max().item<int64_t>(), 9);
  EXPECT_EQ(train.labels()[0].item<int64_t>(), 9);  // "Ankle boot"
  EXPECT_TRUE(torch::equal(torch::bincount(train.labels()), torch::full({10}, 6000, torch::kLong)));

  const PixelStats stats = train.pixel_stats();
  std::cout << "Fashion-MNIST train pixel mean " << stats.mean[0] << ", std " << stats.std[0]
            << "\n";
  EXPECT_NEAR(stats.mean[0], 0.2860406, 1e-6);
  EXPECT_NEAR(stats.std[0], 0.3530, 1e-3);

  const ImageDataset test = load_idx_classification(
      test_paths.images, test_paths.labels,
      ImageDatasetOptions(options).mean(stats.mean).std(stats.std).subsample(1000));
  EXPECT_EQ(test.describe(), "1,000 images 1x28x28, 10 classes");
  const Batch batch = test.get({0, 999});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_NEAR(batch.inputs.min().item<double>(), -stats.mean[0] / stats.std[0], 1e-5);
}

}  // namespace
}  // namespace bigbatch::data
