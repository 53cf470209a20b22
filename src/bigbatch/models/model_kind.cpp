#include "bigbatch/models/model_kind.h"

#include "bigbatch/core/check.h"

namespace bigbatch::models {

const std::vector<ModelKind>& model_kinds() {
  static const std::vector<ModelKind> kinds = {ModelKind::kGpt, ModelKind::kMlp, ModelKind::kResnet,
                                               ModelKind::kBert};
  return kinds;
}

std::string to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::kGpt:
      return "gpt";
    case ModelKind::kMlp:
      return "mlp";
    case ModelKind::kResnet:
      return "resnet";
    case ModelKind::kBert:
      return "bert";
  }
  return "?";
}

std::string model_kind_names(const std::string& separator) {
  std::string names;
  for (const ModelKind kind : model_kinds())
    names += (names.empty() ? "" : separator) + to_string(kind);
  return names;
}

ModelKind parse_model_kind(const std::string& text, const std::string& field) {
  for (const ModelKind kind : model_kinds()) {
    if (text == to_string(kind))
      return kind;
  }
  throw InputError(cat(field, " must be one of ", model_kind_names("|"), ", got \"", text, "\""));
}

}  // namespace bigbatch::models
