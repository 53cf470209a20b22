// The built-in model kinds: the one table of their names, which the config, the model spec and
// exports all spell them with.
#pragma once

#include <string>
#include <vector>

namespace bigbatch::models {

/// Which built-in model a spec builds.
enum class ModelKind {
  kGpt,     ///< byte-level GPT: next byte of a text corpus
  kMlp,     ///< n-gram MLP: next byte of a text corpus
  kResnet,  ///< CIFAR-style ResNet: image classes (Fashion-MNIST or any IDX pair)
  kBert,    ///< BERT-style encoder: which fortune collection a fortune comes from
};

/// Every kind, in the order help texts list them.
const std::vector<ModelKind>& model_kinds();

/// The kind's name: "gpt", "mlp", "resnet", "bert".
std::string to_string(ModelKind kind);

/// The names of model_kinds() joined by `separator` ("gpt|mlp|resnet|bert").
std::string model_kind_names(const std::string& separator);

/// The kind named `text`; throws InputError starting with `field` and listing the names.
ModelKind parse_model_kind(const std::string& text, const std::string& field);

}  // namespace bigbatch::models
