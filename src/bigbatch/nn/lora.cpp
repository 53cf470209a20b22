#include "bigbatch/nn/lora.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_linear.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"

namespace bigbatch::nn {
namespace {

/// The names of the layers that take an adapter, as targets would give them: each name after its
/// last layer number ("attention.self.query" for "encoder.layer.0.attention.self.query"), once.
std::string adaptable_names(torch::nn::Module& module) {
  std::vector<std::string> seen;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    if (item.value()->as<AdaptedLinear>() == nullptr)
      continue;
    const std::string& name = item.key();
    // After the last component that is all digits and has a dot after it.
    size_t tail = 0;
    for (size_t begin = 0, dot = name.find('.'); dot != std::string::npos;
         begin = dot + 1, dot = name.find('.', begin)) {
      const std::string component = name.substr(begin, dot - begin);
      if (!component.empty() && component.find_first_not_of("0123456789") == std::string::npos)
        tail = dot + 1;
    }
    if (std::find(seen.begin(), seen.end(), name.substr(tail)) == seen.end())
      seen.push_back(name.substr(tail));
  }
  if (seen.empty())
    return "the model has no layer that takes an adapter";
  return "layers that take one: " + join(seen, ", ");
}

/// The dtype AdaptedLinears constructed on this thread store weights in (LinearStorageScope).
thread_local std::optional<torch::Dtype> linear_storage;

/// Throws InputError unless `dtype` is one frozen weights may be stored in.
void check_storage_dtype(torch::Dtype dtype) {
  BB_CHECK_INPUT(dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kHalf,
                 "frozen weights can be stored in float32, bfloat16 or float16, not ", dtype);
}

/// y = x W^T + b for a frozen weight W and bias b stored narrower than x: widened for the
/// product, and again in backward, so that autograd keeps the narrow weight (a parameter, held
/// anyway) rather than a widened copy per layer until backward. No gradient for W or b.
class FrozenNarrowLinear : public torch::autograd::Function<FrozenNarrowLinear> {
 public:
  /// x (..., in), weight (out, in) narrow, or (in, out) with `in_out`; bias (out), or empty for
  /// none -> (..., out) in x's dtype
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               bool in_out) {
    ctx->save_for_backward({weight});
    ctx->saved_data["in_out"] = in_out;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    const torch::Tensor w = weight.to(x.scalar_type());
    const torch::Tensor b = bias.numel() > 0 ? bias.to(x.scalar_type()) : torch::Tensor();
    return nn::linear(x, in_out ? w.t() : w, b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor w = ctx->get_saved_variables()[0].to(
        torch::ScalarType(ctx->saved_data["dtype"].toInt()));  // (out, in) or (in, out)
    const torch::Tensor matrix = ctx->saved_data["in_out"].toBool() ? w.t() : w;  // (out, in)
    // dy (..., out) -> dx (..., in) = dy W, on the products nn::linear's backward takes.
    std::vector<int64_t> sizes = grads[0].sizes().vec();
    sizes.back() = matrix.size(1);
    const torch::Tensor dx =
        gemm(grads[0].reshape({-1, matrix.size(0)}).contiguous(), matrix).view(sizes);
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void check_adapter(int64_t rank, double alpha, double dropout) {
  BB_CHECK_INPUT(rank >= 1, "LoraOptions.rank = ", rank, " must be >= 1");
  BB_CHECK_INPUT(alpha > 0, "LoraOptions.alpha = ", alpha, " must be positive");
  BB_CHECK_INPUT(dropout >= 0 && dropout < 1, "LoraOptions.dropout = ", dropout,
                 " must be in [0, 1)");
}

}  // namespace

AdaptedLinearImpl::AdaptedLinearImpl(int64_t in, int64_t out, bool with_bias, WeightLayout layout)
    : in_(in), out_(out), layout_(layout) {
  weight = register_parameter(
      "weight", layout == WeightLayout::kOutIn ? torch::empty({out, in}) : torch::empty({in, out}));
  torch::nn::init::normal_(weight, 0.0, 0.02);
  if (with_bias)
    bias = register_parameter("bias", torch::zeros({out}));
  if (linear_storage && *linear_storage != weight.scalar_type()) {
    torch::NoGradGuard no_grad;
    weight.set_data(weight.to(*linear_storage));
    if (bias.defined())
      bias.set_data(bias.to(*linear_storage));
  }
}

bool module_named(const std::string& name, const std::string& pattern) {
  return name == pattern || ends_with(name, "." + pattern);
}

LinearStorageScope::LinearStorageScope(torch::Dtype dtype) : previous_(linear_storage) {
  check_storage_dtype(dtype);
  linear_storage = dtype;
}

LinearStorageScope::~LinearStorageScope() {
  linear_storage = previous_;
}

void AdaptedLinearImpl::add_lora(int64_t rank, double alpha, double dropout) {
  BB_CHECK_INPUT(!has_lora(), "this layer has a LoRA adapter already");
  check_adapter(rank, alpha, dropout);
  // A weight stored narrow is frozen; the adapter trains, in float32.
  const bool narrow =
      weight.scalar_type() == torch::kBFloat16 || weight.scalar_type() == torch::kHalf;
  const auto options = torch::TensorOptions()
                           .dtype(narrow ? torch::kFloat : weight.scalar_type())
                           .device(weight.device());
  auto a = register_module("lora_A", std::make_shared<torch::nn::Module>());
  auto b = register_module("lora_B", std::make_shared<torch::nn::Module>());
  lora_A = a->register_parameter("weight", torch::empty({rank, in_}, options));
  lora_B = b->register_parameter("weight", torch::zeros({out_, rank}, options));
  torch::nn::init::kaiming_uniform_(lora_A, std::sqrt(5.0));  // as torch.nn.Linear and PEFT
  scale_ = alpha / double(rank);
  dropout_ = dropout;
}

torch::Tensor AdaptedLinearImpl::forward(const torch::Tensor& x) {
  // A frozen weight stored narrower than the activations (store_frozen_weights) is widened for
  // the product; under autocast the product casts it itself.
  const bool widen =
      weight.scalar_type() != x.scalar_type() && !compat::autocast_enabled(x.device().type());
  const bool frozen = !weight.requires_grad() && (!bias.defined() || !bias.requires_grad());
  torch::Tensor y;  // (..., out)
  if (widen && frozen) {
    // An autograd function takes no undefined input: no bias is an empty one.
    y = FrozenNarrowLinear::apply(x, weight, bias.defined() ? bias : torch::empty({0}, x.options()),
                                  layout_ == WeightLayout::kInOut);
  } else {
    const torch::Tensor w = widen ? weight.to(x.scalar_type()) : weight;
    const torch::Tensor b = widen && bias.defined() ? bias.to(x.scalar_type()) : bias;
    y = nn::linear(x, layout_ == WeightLayout::kOutIn ? w : w.t(), b);
  }
  if (!has_lora())
    return y;
  const torch::Tensor dropped = dropout_ > 0 ? torch::dropout(x, dropout_, is_training()) : x;
  return y + nn::linear(nn::linear(dropped, lora_A), lora_B) * scale_;  // (..., out)
}

std::vector<torch::Tensor> adapted_linears(const torch::Tensor& x,
                                           const std::vector<AdaptedLinearImpl*>& layers) {
  std::vector<torch::Tensor> weights, biases;
  bool plain = true;  // no adapter, weights (out, in), biases on all or none
  for (const AdaptedLinearImpl* layer : layers) {
    plain = plain && !layer->has_lora() && layer->layout() == WeightLayout::kOutIn &&
            layer->bias.defined() == layers.front()->bias.defined();
    weights.push_back(layer->weight);
    if (layer->bias.defined())
      biases.push_back(layer->bias);
  }
  if (plain && native_bf16_linears_apply(x, weights, biases))
    return native_bf16_linears(x, weights, biases);
  std::vector<torch::Tensor> outputs;
  for (AdaptedLinearImpl* layer : layers)
    outputs.push_back(layer->forward(x));  // (..., out)
  return outputs;
}

std::vector<std::string> apply_lora(torch::nn::Module& module, const LoraOptions& options) {
  // Every check before anything changes: a refused call leaves the model as it was.
  BB_CHECK_INPUT(!options.targets().empty(), "LoraOptions.targets names no module to adapt");
  check_adapter(options.rank(), options.alpha(), options.dropout());
  std::set<std::string> unmatched(options.targets().begin(), options.targets().end());
  std::set<std::string> unmatched_trainable(options.trainable().begin(), options.trainable().end());
  std::vector<std::string> adapted;
  std::vector<AdaptedLinearImpl*> layers;  // the adapted modules, in the order of `adapted`
  std::vector<std::shared_ptr<torch::nn::Module>> trainable;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    bool target = false;
    for (const std::string& pattern : options.targets()) {
      if (module_named(item.key(), pattern)) {
        target = true;
        unmatched.erase(pattern);
      }
    }
    if (target) {
      auto* layer = item.value()->as<AdaptedLinear>();
      BB_CHECK_INPUT(layer != nullptr && !layer->has_lora(), "LoraOptions.targets: module \"",
                     item.key(),
                     layer == nullptr ? "\" is not a linear layer that takes an adapter"
                                      : "\" has a LoRA adapter already");
      adapted.push_back(item.key());
      layers.push_back(layer);
    }
    for (const std::string& pattern : options.trainable()) {
      if (module_named(item.key(), pattern)) {
        unmatched_trainable.erase(pattern);
        trainable.push_back(item.value());
      }
    }
  }
  BB_CHECK_INPUT(unmatched.empty(), "LoraOptions.targets: \"", *unmatched.begin(),
                 "\" names no module of the model (", adaptable_names(module), ")");
  BB_CHECK_INPUT(unmatched_trainable.empty(), "LoraOptions.trainable: \"",
                 *unmatched_trainable.begin(), "\" names no module of the model");
  for (torch::Tensor& p : module.parameters())
    p.requires_grad_(false);
  for (AdaptedLinearImpl* layer : layers)
    layer->add_lora(options.rank(), options.alpha(), options.dropout());
  for (const auto& kept : trainable) {
    for (torch::Tensor& p : kept->parameters())
      p.requires_grad_(true);
  }
  return adapted;
}

int64_t store_frozen_weights(torch::nn::Module& module, torch::Dtype dtype) {
  check_storage_dtype(dtype);
  int64_t freed = 0;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    auto* layer = item.value()->as<AdaptedLinear>();
    if (layer == nullptr)
      continue;
    for (torch::Tensor* tensor : {&layer->weight, &layer->bias}) {
      if (!tensor->defined() || tensor->requires_grad() || tensor->scalar_type() == dtype)
        continue;
      const int64_t before = tensor->numel() * static_cast<int64_t>(tensor->element_size());
      tensor->set_data(tensor->to(dtype));
      freed += before - tensor->numel() * static_cast<int64_t>(tensor->element_size());
    }
  }
  return freed;
}

}  // namespace bigbatch::nn
