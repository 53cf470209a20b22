#include "bigbatch/models/model_spec.h"

#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/norm.h"

namespace bigbatch::models {
namespace {

using json = nlohmann::ordered_json;

/// What "format" holds in every spec, and the version this code writes and reads.
constexpr const char* kFormat = "bigbatch-model";
constexpr int64_t kVersion = 1;
/// Image pixels are divided by this before normalisation.
constexpr int64_t kPixelScale = 255;

/// Reads a spec's JSON fields with errors that name the field.
class Reader {
 public:
  Reader(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    BB_CHECK_INPUT(object_.is_object(), where_, " must be a JSON object, got ", object_.dump());
  }

  const json& at(const std::string& key) const {
    const auto found = object_.find(key);
    BB_CHECK_INPUT(found != object_.end(), where_, " has no \"", key, "\"");
    return *found;
  }
  int64_t integer(const std::string& key) const {
    const json& value = at(key);
    BB_CHECK_INPUT(value.is_number_integer(), where_, ".", key, " must be an integer, got ",
                   value.dump());
    return value.get<int64_t>();
  }
  double number(const std::string& key) const {
    const json& value = at(key);
    BB_CHECK_INPUT(value.is_number(), where_, ".", key, " must be a number, got ", value.dump());
    return value.get<double>();
  }
  std::string string(const std::string& key) const {
    const json& value = at(key);
    BB_CHECK_INPUT(value.is_string(), where_, ".", key, " must be a string, got ", value.dump());
    return value.get<std::string>();
  }
  template <typename T>
  std::vector<T> list(const std::string& key) const {
    const json& value = at(key);
    try {
      return value.get<std::vector<T>>();
    } catch (const json::exception&) {
      throw InputError(cat(where_, ".", key, " must be a list of ",
                           std::is_same_v<T, std::string> ? "strings" : "numbers", ", got ",
                           value.dump()));
    }
  }
  Reader object(const std::string& key) const { return Reader(at(key), where_ + "." + key); }
  const std::string& where() const { return where_; }

 private:
  const json& object_;
  std::string where_;
};

/// Runs `validate(options)` with `where` in front of its error.
template <typename Options>
void validated(const Options& options, const std::string& where) {
  try {
    validate(options);
  } catch (const InputError& error) {
    throw InputError(cat(where, ": ", error.what()));
  }
}

/// Calls visit(key, option) for every option of the model that the spec holds, in spec order:
/// the one list of keys that spec_to_json and spec_from_json both go through. TORCH_ARG's
/// non-const accessors give references to the fields.
template <typename Visit>
void for_each_option(GptOptions& o, Visit&& visit) {
  visit("vocab", o.vocab());
  visit("context", o.context());
  visit("layers", o.layers());
  visit("heads", o.heads());
  visit("embed", o.embed());
  visit("dropout", o.dropout());
}
template <typename Visit>
void for_each_option(MlpOptions& o, Visit&& visit) {
  visit("vocab", o.vocab());
  visit("context", o.context());
  visit("embed", o.embed());
  visit("hidden", o.hidden());
  visit("layers", o.layers());
  visit("dropout", o.dropout());
}
template <typename Visit>
void for_each_option(ResNetOptions& o, Visit&& visit) {
  visit("depth", o.depth());
  visit("width", o.width());
  visit("norm", o.norm());
  visit("in_channels", o.in_channels());
  visit("classes", o.classes());
}
template <typename Visit>
void for_each_option(BertOptions& o, Visit&& visit) {
  visit("vocab", o.vocab());
  visit("pad_id", o.pad_id());
  visit("context", o.context());
  visit("layers", o.layers());
  visit("heads", o.heads());
  visit("embed", o.embed());
  visit("classes", o.classes());
  visit("dropout", o.dropout());
}
/// The options of `spec.kind`.
template <typename Visit>
void for_each_option(ModelSpec& spec, Visit&& visit) {
  switch (spec.kind) {
    case ModelKind::kGpt:
      return for_each_option(spec.gpt, visit);
    case ModelKind::kMlp:
      return for_each_option(spec.mlp, visit);
    case ModelKind::kResnet:
      return for_each_option(spec.resnet, visit);
    case ModelKind::kBert:
      return for_each_option(spec.bert, visit);
  }
}

json options_json(ModelSpec spec) {
  json out = json::object();
  for_each_option(spec, [&out](const char* key, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, nn::NormKind>)
      out[key] = nn::to_string(value);
    else
      out[key] = value;
  });
  return out;
}

/// Bytes a text model reads at most.
int64_t text_context(const ModelSpec& spec) {
  return spec.kind == ModelKind::kGpt   ? spec.gpt.context()
         : spec.kind == ModelKind::kMlp ? spec.mlp.context()
                                        : spec.bert.context();
}

json input_json(const ModelSpec& spec) {
  if (spec.kind == ModelKind::kResnet) {
    return {{"type", "image"},
            {"channels", spec.image.channels},
            {"height", spec.image.height},
            {"width", spec.image.width},
            {"scale", kPixelScale},
            {"mean", spec.image.mean},
            {"std", spec.image.std}};
  }
  json out = {{"type", "bytes"}, {"context", text_context(spec)}};
  if (spec.kind == ModelKind::kBert)
    out["pad_id"] = spec.bert.pad_id();
  return out;
}

/// Reads the options of `spec.kind` and validates them as the model's constructor would.
void read_options(const Reader& o, ModelSpec& spec) {
  for_each_option(spec, [&o](const char* key, auto& value) {
    using Option = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<Option, nn::NormKind>)
      value = nn::parse_norm_kind(o.string(key), o.where() + "." + key);
    else if constexpr (std::is_same_v<Option, double>)
      value = o.number(key);
    else
      value = o.integer(key);
  });
  switch (spec.kind) {
    case ModelKind::kGpt:
      return validated(spec.gpt, o.where());
    case ModelKind::kMlp:
      return validated(spec.mlp, o.where());
    case ModelKind::kResnet:
      return validated(spec.resnet, o.where());
    case ModelKind::kBert:
      return validated(spec.bert, o.where());
  }
}

/// Reads the input section and checks that it agrees with the options.
void read_input(const Reader& in, ModelSpec& spec) {
  const std::string type = in.string("type");
  if (spec.kind == ModelKind::kResnet) {
    BB_CHECK_INPUT(type == "image", in.where(), ".type must be \"image\" for a resnet, got \"",
                   type, "\"");
    ImageInputSpec& image = spec.image;
    image.channels = in.integer("channels");
    image.height = in.integer("height");
    image.width = in.integer("width");
    image.mean = in.list<double>("mean");
    image.std = in.list<double>("std");
    BB_CHECK_INPUT(image.channels == spec.resnet.in_channels(), in.where(), ".channels (",
                   image.channels, ") differs from options.in_channels (",
                   spec.resnet.in_channels(), ")");
    BB_CHECK_INPUT(image.height > 0 && image.width > 0, in.where(),
                   ": height and width must be positive, got ", image.height, " x ", image.width);
    BB_CHECK_INPUT(in.integer("scale") == kPixelScale, in.where(), ".scale must be ", kPixelScale,
                   ", got ", in.integer("scale"));
    for (const auto* values : {&image.mean, &image.std}) {
      const auto count = static_cast<int64_t>(values->size());
      BB_CHECK_INPUT(count == 1 || count == image.channels, in.where(), ": mean and std need 1 or ",
                     image.channels, " values, got ", count);
    }
    for (const double deviation : image.std)
      BB_CHECK_INPUT(deviation > 0.0, in.where(), ".std must be positive, got ", deviation);
    return;
  }
  BB_CHECK_INPUT(type == "bytes", in.where(), ".type must be \"bytes\" for a ",
                 to_string(spec.kind), ", got \"", type, "\"");
  const int64_t context = text_context(spec);
  BB_CHECK_INPUT(in.integer("context") == context, in.where(), ".context (", in.integer("context"),
                 ") differs from options.context (", context, ")");
  if (spec.kind == ModelKind::kBert) {
    BB_CHECK_INPUT(in.integer("pad_id") == spec.bert.pad_id(), in.where(), ".pad_id (",
                   in.integer("pad_id"), ") differs from options.pad_id (", spec.bert.pad_id(),
                   ")");
  }
}

/// The holder's forward pass as a function of the inputs.
template <typename ModuleHolder>
std::function<torch::Tensor(const torch::Tensor&)> forward_of(ModuleHolder model) {
  return [model](const torch::Tensor& inputs) mutable { return model->forward(inputs); };
}

/// Converts the floating-point parameters and buffers of `module` to `dtype`, as PyTorch's
/// Module.to(dtype) does. LibTorch's Module::to(dtype) converts every tensor, so it would turn
/// BatchNorm's int64 num_batches_tracked into a floating-point buffer.
void to_floating_dtype(torch::nn::Module& module, torch::Dtype dtype) {
  for (std::vector<torch::Tensor> tensors : {module.parameters(), module.buffers()}) {
    for (torch::Tensor& tensor : tensors) {
      if (tensor.is_floating_point() && tensor.scalar_type() != dtype)
        tensor.set_data(tensor.to(dtype));
    }
  }
}

}  // namespace

int64_t ModelSpec::classes() const {
  switch (kind) {
    case ModelKind::kResnet:
      return resnet.classes();
    case ModelKind::kBert:
      return bert.classes();
    case ModelKind::kGpt:
    case ModelKind::kMlp:
      return 0;
  }
  return 0;
}

json spec_to_json(const ModelSpec& spec) {
  json out = {{"format", kFormat},
              {"version", kVersion},
              {"kind", to_string(spec.kind)},
              {"dtype", spec.float64 ? "float64" : "float32"},
              {"options", options_json(spec)},
              {"input", input_json(spec)}};
  if (spec.classes() > 0)
    out["classes"] = spec.class_names;
  return out;
}

ModelSpec spec_from_json(const json& json_spec, const std::string& origin) {
  const Reader top(json_spec, origin + ": model spec");
  BB_CHECK_INPUT(top.string("format") == kFormat, top.where(), ".format must be \"", kFormat,
                 "\", got \"", top.string("format"), "\"");
  BB_CHECK_INPUT(top.integer("version") == kVersion, top.where(), ".version ",
                 top.integer("version"), " is not supported (this bigbatch reads version ",
                 kVersion, ")");
  ModelSpec spec;
  spec.kind = parse_model_kind(top.string("kind"), top.where() + ".kind");
  const std::string dtype = top.string("dtype");
  BB_CHECK_INPUT(dtype == "float32" || dtype == "float64", top.where(),
                 ".dtype must be \"float32\" or \"float64\", got \"", dtype, "\"");
  spec.float64 = dtype == "float64";
  read_options(top.object("options"), spec);
  read_input(top.object("input"), spec);
  if (spec.classes() > 0) {
    spec.class_names = top.list<std::string>("classes");
    BB_CHECK_INPUT(static_cast<int64_t>(spec.class_names.size()) == spec.classes(), top.where(),
                   ".classes has ", spec.class_names.size(), " names for ", spec.classes(),
                   " classes (options.classes)");
  }
  return spec;
}

BuiltModel build_model(const ModelSpec& spec) {
  BuiltModel built;
  switch (spec.kind) {
    case ModelKind::kGpt:
      built.gpt = Gpt(spec.gpt);
      built.module = built.gpt.ptr();
      built.forward = forward_of(built.gpt);
      break;
    case ModelKind::kMlp:
      built.mlp = Mlp(spec.mlp);
      built.module = built.mlp.ptr();
      built.forward = forward_of(built.mlp);
      break;
    case ModelKind::kResnet:
      built.resnet = ResNet(spec.resnet);
      built.module = built.resnet.ptr();
      built.forward = forward_of(built.resnet);
      break;
    case ModelKind::kBert:
      built.bert = Bert(spec.bert);
      built.module = built.bert.ptr();
      built.forward = forward_of(built.bert);
      break;
  }
  to_floating_dtype(*built.module, spec.dtype());
  return built;
}

void set_checkpointing(BuiltModel& model, const nn::CheckpointPolicy& policy) {
  if (model.gpt)
    model.gpt->set_checkpointing(policy);
  else if (model.resnet)
    model.resnet->set_checkpointing(policy);
  else if (model.bert)
    model.bert->set_checkpointing(policy);
  else
    BB_CHECK_INPUT(policy.mode == nn::CheckpointMode::kNone,
                   "the mlp has no blocks to checkpoint; use checkpointing \"none\"");
}

}  // namespace bigbatch::models
