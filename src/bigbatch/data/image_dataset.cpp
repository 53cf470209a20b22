#include "bigbatch/data/image_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/idx.h"
#include "bigbatch/data/shuffle.h"

namespace bigbatch::data {
namespace {

std::string shape_text(torch::IntArrayRef sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i)
    out += (i > 0 ? "x" : "") + std::to_string(sizes[i]);
  return out;
}

/// `images` as (N, C, H, W) uint8, contiguous.
torch::Tensor as_nchw(torch::Tensor images, const std::string& name) {
  BB_CHECK_INPUT(images.defined(), name, ": the images tensor is undefined");
  BB_CHECK_INPUT(images.scalar_type() == torch::kByte, name, ": images must be uint8, got ",
                 images.scalar_type());
  BB_CHECK_INPUT(images.dim() == 3 || images.dim() == 4, name,
                 ": images must be (N, H, W) or (N, C, H, W), got shape ",
                 shape_text(images.sizes()));
  if (images.dim() == 3)
    images = images.unsqueeze(1);
  return images.contiguous();
}

/// `labels` as (N) int64.
torch::Tensor as_label_ids(const torch::Tensor& labels, const std::string& name) {
  BB_CHECK_INPUT(labels.defined(), name, ": the labels tensor is undefined");
  BB_CHECK_INPUT(labels.scalar_type() == torch::kByte || labels.scalar_type() == torch::kLong, name,
                 ": labels must be uint8 or int64, got ", labels.scalar_type());
  BB_CHECK_INPUT(labels.dim() == 1, name, ": labels must be (N), got shape ",
                 shape_text(labels.sizes()));
  return labels.to(torch::kLong).contiguous();
}

/// The number of classes the options ask for (0: the largest label + 1), with every label of
/// `labels` ((N) int64) checked to lie below it. `what` names the labels in messages.
int64_t resolve_num_classes(const torch::Tensor& labels, const ImageDatasetOptions& options,
                            const std::string& what) {
  const auto names = static_cast<int64_t>(options.class_names().size());
  BB_CHECK_INPUT(options.num_classes() >= 0, what, ": num_classes must be >= 0, got ",
                 options.num_classes());
  BB_CHECK_INPUT(names == 0 || options.num_classes() == 0 || names == options.num_classes(), what,
                 ": ", names, " class names given for num_classes ", options.num_classes());
  int64_t num_classes = options.num_classes() > 0 ? options.num_classes() : names;
  const int64_t* label = labels.data_ptr<int64_t>();
  const int64_t n = labels.numel();
  if (num_classes == 0) {
    for (int64_t i = 0; i < n; ++i)
      num_classes = std::max(num_classes, label[i] + 1);
  }
  for (int64_t i = 0; i < n; ++i) {
    BB_CHECK_INPUT(
        label[i] >= 0 &&
                label[i]<num_classes, what, " has label ", label[i], " at index ", i,
                         "; expected labels in [0, ", num_classes, ")", options.num_classes()> 0
            ? " (num_classes)"
            : "");
  }
  return num_classes;
}

/// A (1, C, 1, 1) float32 tensor of one value per channel (or (1, 1, 1, 1) for one value).
torch::Tensor per_channel(const std::vector<double>& values, int64_t channels,
                          const std::string& field, const std::string& name) {
  const auto n = static_cast<int64_t>(values.size());
  BB_CHECK_INPUT(n == 1 || n == channels, name, ": ", field,
                 " must have 1 value or one per channel (", channels, "), got ", n);
  std::vector<float> floats(values.begin(), values.end());
  return torch::tensor(floats, torch::kFloat).view({1, n, 1, 1});
}

}  // namespace

ImageDataset::ImageDataset(torch::Tensor images, torch::Tensor labels,
                           const ImageDatasetOptions& options)
    : options_(options) {
  const std::string& name = options_.name();
  images_ = as_nchw(std::move(images), name);
  labels_ = as_label_ids(labels, name);
  const int64_t n = images_.size(0);
  BB_CHECK_INPUT(n > 0, name, ": no images (shape ", shape_text(images_.sizes()), ")");
  BB_CHECK_INPUT(labels_.size(0) == n, name, ": ", group_thousands(labels_.size(0)), " labels for ",
                 group_thousands(n), " images");
  num_classes_ = resolve_num_classes(labels_, options_, name);

  const int64_t channels = images_.size(1);
  mean_ = per_channel(options_.mean(), channels, "mean", name);
  std_ = per_channel(options_.std(), channels, "std", name);
  for (const double s : options_.std())
    BB_CHECK_INPUT(s > 0 && std::isfinite(s), name, ": std values must be > 0, got ", s);
  for (const double m : options_.mean())
    BB_CHECK_INPUT(std::isfinite(m), name, ": mean values must be finite, got ", m);

  const int64_t keep = options_.subsample();
  BB_CHECK_INPUT(keep >= 0 && keep <= n, name, ": subsample must be in [0, ", n, "], got ", keep);
  if (keep > 0 && keep < n) {
    std::vector<int64_t> order = epoch_permutation(n, options_.subsample_seed(), 0);
    order.resize(static_cast<size_t>(keep));
    std::sort(order.begin(), order.end());
    const torch::Tensor index = torch::tensor(order, torch::kLong);  // (keep)
    images_ = images_.index_select(0, index);
    labels_ = labels_.index_select(0, index);
  }
}

int64_t ImageDataset::size() const {
  return images_.size(0);
}

Batch ImageDataset::get(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (const int64_t i : indices)
    BB_CHECK(i >= 0 && i < n, "image index ", i, " is outside [0, ", n, ")");
  const torch::Tensor index =
      torch::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                       torch::kLong);                           // (B)
  const torch::Tensor pixels = images_.index_select(0, index);  // (B, C, H, W) uint8
  torch::Tensor inputs = pixels.to(torch::kFloat).div_(255.0).sub_(mean_).div_(std_);
  torch::Tensor targets = labels_.index_select(0, index);  // (B) int64
  return {inputs, targets};
}

std::string ImageDataset::describe() const {
  return cat(group_thousands(size()), " images ", shape_text(images_.sizes().slice(1)), ", ",
             num_classes_, num_classes_ == 1 ? " class" : " classes");
}

PixelStats ImageDataset::pixel_stats(const torch::Tensor& images) {
  const torch::Tensor nchw = as_nchw(images, "pixel_stats");  // (N, C, H, W) uint8
  const int64_t n = nchw.size(0);
  const int64_t channels = nchw.size(1);
  const int64_t plane = nchw.size(2) * nchw.size(3);
  BB_CHECK_INPUT(n * plane > 0, "pixel_stats: no pixels in images of shape ",
                 shape_text(nchw.sizes()));
  const uint8_t* data = nchw.data_ptr<uint8_t>();
  PixelStats stats;
  for (int64_t c = 0; c < channels; ++c) {
    std::array<int64_t, 256> histogram{};
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* pixel = data + (i * channels + c) * plane;
      for (int64_t p = 0; p < plane; ++p)
        ++histogram[pixel[p]];
    }
    const auto count = static_cast<double>(n * plane);
    double mean = 0;
    for (int v = 0; v < 256; ++v)
      mean += static_cast<double>(histogram[v]) * (v / 255.0);
    mean /= count;
    double variance = 0;
    for (int v = 0; v < 256; ++v) {
      const double deviation = v / 255.0 - mean;
      variance += static_cast<double>(histogram[v]) * deviation * deviation;
    }
    stats.mean.push_back(mean);
    stats.std.push_back(std::sqrt(variance / count));
  }
  return stats;
}

ImageDataset load_idx_classification(const std::string& images_path, const std::string& labels_path,
                                     const ImageDatasetOptions& options) {
  // The labels first: they are small, so a broken pair fails fast.
  const IdxArray labels = read_idx(labels_path);
  BB_CHECK_INPUT(labels.dims.size() == 1, "labels file '", labels_path, "' has rank ",
                 labels.dims.size(), " (shape ", shape_text(labels.dims), "); expected rank 1 (N)");
  const IdxArray images = read_idx(images_path);
  BB_CHECK_INPUT(images.dims.size() == 3 || images.dims.size() == 4, "images file '", images_path,
                 "' has rank ", images.dims.size(), " (shape ", shape_text(images.dims),
                 "); expected rank 3 (N, H, W) or 4 (N, C, H, W)");
  BB_CHECK_INPUT(labels.dims[0] == images.dims[0], "labels file '", labels_path, "' has ",
                 group_thousands(labels.dims[0]), " labels but images file '", images_path,
                 "' has ", group_thousands(images.dims[0]),
                 " images; expected one label per image");
  const torch::Tensor label_ids = labels.data.to(torch::kLong);  // (N) int64
  resolve_num_classes(label_ids, options, cat("labels file '", labels_path, "'"));
  ImageDatasetOptions named = options;
  if (named.name() == ImageDatasetOptions().name())
    named.name(images_path);
  return ImageDataset(images.data, label_ids, named);
}

IdxPaths fashion_mnist_paths(const std::string& directory, const std::string& split) {
  BB_CHECK_INPUT(split == "train" || split == "test", "Fashion-MNIST split must be 'train' or ",
                 "'test', got '", split, "'");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::filesystem::path dir(directory);
  return {(dir / (prefix + "-images-idx3-ubyte.gz")).string(),
          (dir / (prefix + "-labels-idx1-ubyte.gz")).string()};
}

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

}  // namespace bigbatch::data
