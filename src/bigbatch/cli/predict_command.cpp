#include "bigbatch/cli/predict_command.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "bigbatch/cli/hf_inference.h"
#include "bigbatch/core/check.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/idx.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/job/hf_workload.h"
#include "bigbatch/models/hf_model.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/nn/precision.h"

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

/// The texts of a predict input file: inputs separated by lines holding only %.
std::vector<std::string> input_texts(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());
  }
  std::vector<std::string> texts = data::split_fortunes(text);
  BB_CHECK_INPUT(!texts.empty(), path,
                 ": no text to classify (inputs are separated by lines holding only %)");
  return texts;
}

std::unique_ptr<data::Dataset> text_inputs(const models::ModelSpec& spec, const std::string& path) {
  std::vector<std::string> texts = input_texts(path);
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

namespace {

/// Prints one line per input of `inputs`: its index and the `top` likeliest classes with their
/// probabilities. `forward` maps a batch's inputs, moved to `device`, to logits (B, classes).
void print_predictions(const data::Dataset& inputs,
                       const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                       const std::vector<std::string>& class_names, int64_t top, c10::Device device,
                       std::ostream& out) {
  torch::NoGradGuard no_grad;
  for (int64_t start = 0; start < inputs.size(); start += kChunk) {
    std::vector<int64_t> indices(static_cast<size_t>(std::min(kChunk, inputs.size() - start)));
    std::iota(indices.begin(), indices.end(), start);
    const torch::Tensor logits = forward(inputs.get(indices).inputs.to(device));  // (B, K)
    const torch::Tensor probs =
        torch::softmax(logits.to(torch::kCPU, torch::kFloat64), /*dim=*/-1);  // (B, K)
    const auto [values, classes] = torch::topk(probs, top);                   // (B, top)
    for (int64_t b = 0; b < values.size(0); ++b) {
      out << start + b;
      for (int64_t k = 0; k < top; ++k) {
        out << '\t' << class_names.at(static_cast<size_t>(classes[b][k].item<int64_t>())) << '\t'
            << probability_text(values[b][k].item<double>());
      }
      out << '\n';
    }
  }
}

/// The class names of a Hugging Face classifier: config.json's id2label, or LABEL_<i>.
std::vector<std::string> hf_class_names(const std::string& directory, int64_t classes) {
  const nlohmann::json config =
      nlohmann::json::parse(io::read_file(directory + "/config.json"), nullptr, false);
  std::vector<std::string> names;
  for (int64_t i = 0; i < classes; ++i) {
    const std::string key = std::to_string(i);
    const bool named = config.is_object() && config.contains("id2label") &&
                       config["id2label"].contains(key) && config["id2label"][key].is_string();
    names.push_back(named ? config["id2label"][key].get<std::string>() : "LABEL_" + key);
  }
  return names;
}

/// A classifier of a Hugging Face model directory (or a PEFT adapter on one), with its tokenizer.
int predict_hf(const PredictOptions& options, const InferenceSettings& settings,
               std::ostream& out) {
  const InferenceModel loaded = load_inference_model(
      InferenceModelOptions{options.model_path, options.base,
                            settings.precision == nn::Precision::kBf16, settings.device});
  const models::HfModel& model = loaded.model;
  BB_CHECK_INPUT(model.task == models::HfTask::kClassification,
                 "bigbatch predict needs a classifier; ", options.model_path, " holds a ",
                 model.model_type, " language model (use bigbatch generate)");
  BB_CHECK_INPUT(options.top >= 1 && options.top <= model.outputs(), "--top must be in [1, ",
                 model.outputs(), "] (the model's classes), got ", options.top);
  const std::unique_ptr<text::Tokenizer>& tokenizer = loaded.tokenizer;
  const int64_t context = std::min<int64_t>(512, model.max_positions());
  std::vector<data::TokenIds> sequences;
  for (const std::string& text : input_texts(options.input_path))
    sequences.push_back(job::encode_truncated(*tokenizer, text, context));
  const std::vector<int64_t> labels(sequences.size(), 0);
  const std::vector<std::string> names = hf_class_names(loaded.model_directory, model.outputs());
  const int64_t pad = job::hf_pad_id(*tokenizer);
  const data::TokenClassificationDataset inputs(
      std::move(sequences), labels, names,
      data::TokenDatasetOptions(context).pad_id(pad).name(options.input_path));
  const nn::AutocastGuard autocast(settings.precision, settings.device.type());
  print_predictions(
      inputs, [&model, pad](const torch::Tensor& x) { return model.forward(x, x.ne(pad)); }, names,
      options.top, settings.device, out);
  return 0;
}

}  // namespace

int run_predict(const PredictOptions& options, std::ostream& out) {
  const InferenceSettings settings = check_inference_options(
      {options.model_path, options.base, options.precision, options.device});
  if (std::filesystem::is_directory(options.model_path))
    return predict_hf(options, settings, out);
  models::ExportedModel exported = models::load_exported(options.model_path);
  const models::ModelSpec& spec = exported.spec;
  BB_CHECK_INPUT(spec.classes() > 0, "bigbatch predict needs a classifier (resnet or bert); ",
                 options.model_path, " holds a ", models::to_string(spec.kind),
                 " language model (use bigbatch generate)");
  BB_CHECK_INPUT(options.top >= 1 && options.top <= spec.classes(), "--top must be in [1, ",
                 spec.classes(), "] (the model's classes), got ", options.top);
  const std::unique_ptr<data::Dataset> inputs = classifier_inputs(spec, options.input_path);
  exported.model.module->to(settings.device);
  const nn::AutocastGuard autocast(settings.precision, settings.device.type());
  print_predictions(
      *inputs,
      [&exported, &spec](const torch::Tensor& x) {
        // (B, C, H, W) float32 or (B, T) int64
        return exported.model.forward(x.is_floating_point() ? x.to(spec.dtype()) : x);
      },
      spec.class_names, options.top, settings.device, out);
  return 0;
}

}  // namespace bigbatch::cli
