// `bigbatch predict`: classify images or texts with an exported ResNet or BERT, or with a Hugging
// Face classifier directory.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "bigbatch/data/dataset.h"
#include "bigbatch/models/model_spec.h"

namespace bigbatch::cli {

/// What the command line gave `bigbatch predict`.
struct PredictOptions {
  std::string model_path;  ///< an export (export_model) of a resnet or bert, an HF directory, or
                           ///< a PEFT adapter directory
  std::string base;        ///< an adapter's base model directory ("": its adapter_config.json's)
  std::string input_path;  ///< IDX images (resnet) or a text file (bert)
  int64_t top = 1;         ///< classes printed per input, likeliest first
  /// "fp32", or "bf16": forward passes under bf16 autocast, and a Hugging Face model's linear
  /// weights stored in bfloat16 from loading on (nn::LinearStorageScope); "fp16" on a GPU.
  std::string precision = "fp32";
  /// Where the model computes: "cpu", "cuda", "cuda:N" or "auto" (bigbatch::parse_device).
  std::string device = "cpu";
};

/// The inputs of `path` for the classifier of `spec`, preprocessed as in training: for a resnet an
/// IDX image file (gzip or raw, see data::read_idx) of shape (N, H, W) or (N, C, H, W) whose
/// C x H x W are the spec's, normalised with the spec's mean and std (data::ImageDataset); for a
/// bert a text file of inputs separated by lines holding only "%" (the fortune file format,
/// data::split_fortunes; a file without such lines is one input), each cut to the context and
/// padded with pad_id (data::FortuneDataset). The targets are zeros. Throws InputError naming the
/// file and the cause.
std::unique_ptr<data::Dataset> classifier_inputs(const models::ModelSpec& spec,
                                                 const std::string& path);

/// Loads the export and prints one line per input, in input order: its index, then the `top`
/// likeliest classes, each as its name and its probability (softmax of the logits), separated by
/// tabs, for example "0\tAnkle boot\t0.9712". A directory is read as a Hugging Face classifier
/// with its tokenizer: texts as for a bert, cut to 512 tokens or the model's positions, classes
/// named by its config's id2label; a PEFT adapter directory as its base model with the adapters
/// merged and its saved classifier (cli::load_inference_model). Throws InputError for a `top`
/// outside [1, classes], a file that is not an export, a model that is not a classifier, or bad
/// inputs.
int run_predict(const PredictOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
