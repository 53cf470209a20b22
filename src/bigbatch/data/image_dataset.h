// Image classification: uint8 images with integer labels, from tensors or a pair of IDX files.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

/// Settings of an ImageDataset. Chained setters:
///   ImageDatasetOptions().mean({0.2860}).std({0.3530}).subsample(5000)
struct ImageDatasetOptions {
  /// Subtracted from the [0, 1]-scaled pixels: one value for every channel, or one per channel.
  TORCH_ARG(std::vector<double>, mean) = {0.0};
  /// The scaled pixels minus mean are divided by this: one value, or one per channel; each > 0.
  TORCH_ARG(std::vector<double>, std) = {1.0};
  /// Labels must lie in [0, num_classes); 0 means the largest label + 1, or the number of
  /// class_names when they are given.
  TORCH_ARG(int64_t, num_classes) = 0;
  /// Optional names of the classes, by label; when given there must be num_classes of them.
  TORCH_ARG(std::vector<std::string>, class_names) = {};
  /// When > 0, keep only this many samples: a uniformly drawn subset that depends only on
  /// (N, subsample, subsample_seed), kept in the original order. 0 keeps all. num_classes is
  /// decided on all samples before subsampling.
  TORCH_ARG(int64_t, subsample) = 0;
  /// Seed of the subset drawn by `subsample`.
  TORCH_ARG(uint64_t, subsample_seed) = 0;
  /// What the data is, for error messages, for example "Fashion-MNIST train".
  TORCH_ARG(std::string, name) = "images";
};

/// Per-channel mean and standard deviation of pixels scaled to [0, 1].
struct PixelStats {
  std::vector<double> mean;  ///< one per channel
  std::vector<double> std;   ///< one per channel, population standard deviation
};

/// Image classification samples: inputs are images as float32 in (B, C, H, W), scaled to [0, 1]
/// and normalised with the options' mean and std; targets are int64 class ids (B). Usage:
///   ImageDataset train(images, labels, ImageDatasetOptions().name("train"));
///   ImageDataset test(test_images, test_labels,
///                     ImageDatasetOptions().mean(stats.mean).std(stats.std));
///   Batch batch = train.get({0, 5, 7});  // inputs (3, C, H, W) float32, targets (3) int64
class ImageDataset : public Dataset {
 public:
  /// `images` uint8 (N, H, W) (one channel) or (N, C, H, W); `labels` uint8 or int64 (N).
  /// Keeps the images as uint8 (a contiguous copy only when they are not contiguous). Throws
  /// InputError naming options.name() and the values for wrong dtypes or ranks, N = 0,
  /// different image and label counts, a label outside [0, num_classes), a mean or std whose
  /// length is neither 1 nor C, a std <= 0, class_names of the wrong length, or subsample outside
  /// [0, N].
  ImageDataset(torch::Tensor images, torch::Tensor labels, const ImageDatasetOptions& options = {});

  /// Number of images N (after subsampling).
  int64_t size() const override;
  /// inputs (B, C, H, W) float32: (pixel / 255 - mean[c]) / std[c]; targets (B) int64. An index
  /// outside [0, size()) throws std::logic_error (a bug in the caller, not in the data).
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "60,000 images 1x28x28, 10 classes".
  std::string describe() const override;

  /// Number of classes: labels lie in [0, num_classes()).
  int64_t num_classes() const { return num_classes_; }
  /// Class names by label; empty when the options gave none.
  const std::vector<std::string>& class_names() const { return options_.class_names(); }
  /// The images, (N, C, H, W) uint8 contiguous.
  const torch::Tensor& images() const { return images_; }
  /// The labels, (N) int64.
  const torch::Tensor& labels() const { return labels_; }
  /// The options the dataset was made with.
  const ImageDatasetOptions& options() const { return options_; }

  /// Exact per-channel mean and std of `images` (uint8 (N, H, W) or (N, C, H, W)) scaled to
  /// [0, 1], from a histogram of the byte values. Compute them on the training split and pass
  /// them to every split's options. Throws InputError for a wrong dtype or rank or no pixels.
  static PixelStats pixel_stats(const torch::Tensor& images);
  /// pixel_stats() of this dataset's images.
  PixelStats pixel_stats() const { return pixel_stats(images_); }

 private:
  ImageDatasetOptions options_;
  torch::Tensor images_;  // (N, C, H, W) uint8
  torch::Tensor labels_;  // (N) int64
  torch::Tensor mean_;    // (1, C, 1, 1) or (1, 1, 1, 1) float32
  torch::Tensor std_;     // (1, C, 1, 1) or (1, 1, 1, 1) float32
  int64_t num_classes_ = 0;
};

/// Loads an image classification data set from two IDX files (gzip-compressed or raw, see
/// read_idx): images of rank 3 (N, H, W) or 4 (N, C, H, W) and labels of rank 1 (N). Throws
/// InputError naming the file for read errors and wrong ranks, naming both files and both counts
/// when the label count differs from the image count, and naming the labels file, the label and
/// its index when a label is >= options.num_classes(). `options.name()` left at its default
/// becomes the images path. Usage:
///   const IdxPaths paths = fashion_mnist_paths(kFashionMnistDirectory, "train");
///   ImageDataset train = load_idx_classification(paths.images, paths.labels,
///       ImageDatasetOptions().class_names(fashion_mnist_class_names()));
ImageDataset load_idx_classification(const std::string& images_path, const std::string& labels_path,
                                     const ImageDatasetOptions& options = {});

/// The two files of an IDX classification split.
struct IdxPaths {
  std::string images;  ///< rank-3 or rank-4 uint8 IDX file
  std::string labels;  ///< rank-1 uint8 IDX file
};

/// Where Debian's `dataset-fashion-mnist` package puts Fashion-MNIST.
inline constexpr const char* kFashionMnistDirectory = "/usr/share/datasets/fashion-mnist";

/// The Fashion-MNIST files of `split` ("train": 60,000 images, or "test": 10,000) in
/// `directory`: {train,t10k}-images-idx3-ubyte.gz and {train,t10k}-labels-idx1-ubyte.gz. Checks
/// nothing on disk; throws InputError naming the split when it is neither "train" nor "test".
IdxPaths fashion_mnist_paths(const std::string& directory, const std::string& split);

/// The 10 Fashion-MNIST class names by label: "T-shirt/top", "Trouser", "Pullover", "Dress",
/// "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot".
const std::vector<std::string>& fashion_mnist_class_names();

}  // namespace bigbatch::data
