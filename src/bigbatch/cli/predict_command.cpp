#include "bigbatch/cli/predict_command.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/idx.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/models/model_export.h"

namespace bigbatch::cli {
namespace {

/// Inputs classified per forward pass: bounds the memory of a large input file.
constexpr int64_t kChunk = 256;

std::unique_ptr<data::Dataset> image_inputs(const models::ImageInputSpec& image, int64_t classes,
                                            const std::string& path) {
  data::IdxArray array = data::read_idx(path);
  const std::vector<int64_t>& dims = array.dims;
  BB_CHECK_INPUT(dims.size() == 3 || dims.size() == 4, path, ": holds an array of rank ",
                 dims.size(), ", expected images (N, H, W) or (N, C, H, W)");
  const int64_t channels = dims.size() == 4 ? dims[1] : 1;
  BB_CHECK_INPUT(channels == image.channels && dims[dims.size() - 2] == image.height &&
                     dims.back() == image.width,
                 path, ": images are ", channels, "x", dims[dims.size() - 2], "x", dims.back(),
                 ", the model takes ", image.channels, "x", image.height, "x", image.width);
  const int64_t count = dims[0];
  return std::make_unique<data::ImageDataset>(
      array.data, torch::zeros({count}, torch::kLong),
      data::ImageDatasetOptions().mean(image.mean).std(image.std).num_classes(classes).name(path));
}

std::unique_ptr<data::Dataset> text_inputs(const models::ModelSpec& spec, const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());
  }
  std::vector<std::string> texts = data::split_fortunes(text);
  BB_CHECK_INPUT(!texts.empty(), path,
                 ": no text to classify (inputs are separated by lines holding only %)");
  const std::vector<int64_t> labels(texts.size(), 0);
  return std::make_unique<data::FortuneDataset>(std::move(texts), labels, spec.class_names,
                                                spec.bert.context());
}

/// "0.9712"
std::string probability_text(double p) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.4f", p);
  return buffer;
}

}  // namespace

std::unique_ptr<data::Dataset> classifier_inputs(const models::ModelSpec& spec,
                                                 const std::string& path) {
  BB_CHECK(spec.classes() > 0, "classifier_inputs needs a classifier's spec");
  if (spec.kind == models::ModelKind::kResnet)
    return image_inputs(spec.image, spec.classes(), path);
  return text_inputs(spec, path);
}

int run_predict(const PredictOptions& options, std::ostream& out) {
  models::ExportedModel exported = models::load_exported(options.model_path);
  const models::ModelSpec& spec = exported.spec;
  BB_CHECK_INPUT(spec.classes() > 0, "bigbatch predict needs a classifier (resnet or bert); ",
                 options.model_path, " holds a ", models::to_string(spec.kind),
                 " language model (use bigbatch generate)");
  BB_CHECK_INPUT(options.top >= 1 && options.top <= spec.classes(), "--top must be in [1, ",
                 spec.classes(), "] (the model's classes), got ", options.top);
  const std::unique_ptr<data::Dataset> inputs = classifier_inputs(spec, options.input_path);
  torch::NoGradGuard no_grad;
  for (int64_t start = 0; start < inputs->size(); start += kChunk) {
    std::vector<int64_t> indices(static_cast<size_t>(std::min(kChunk, inputs->size() - start)));
    std::iota(indices.begin(), indices.end(), start);
    torch::Tensor x = inputs->get(indices).inputs;  // (B, C, H, W) float32 or (B, T) int64
    if (x.is_floating_point())
      x = x.to(spec.dtype());
    const torch::Tensor probs =
        torch::softmax(exported.model.forward(x).to(torch::kFloat64), /*dim=*/-1);  // (B, K)
    const auto [values, classes] = torch::topk(probs, options.top);                 // (B, top)
    for (int64_t b = 0; b < values.size(0); ++b) {
      out << start + b;
      for (int64_t k = 0; k < options.top; ++k) {
        out << '\t' << spec.class_names.at(static_cast<size_t>(classes[b][k].item<int64_t>()))
            << '\t' << probability_text(values[b][k].item<double>());
      }
      out << '\n';
    }
  }
  return 0;
}

}  // namespace bigbatch::cli
