#include "bigbatch/nn/lora_merge.h"

namespace bigbatch::nn {

torch::Tensor merged_lora_weight(const AdaptedLinearImpl& layer, torch::Dtype dtype) {
  torch::NoGradGuard no_grad;
  if (!layer.has_lora())
    return layer.weight.to(dtype);
  // (out, rank) x (rank, in) -> (out, in), in float64 so that only the final cast rounds.
  torch::Tensor delta =
      torch::matmul(layer.lora_B.to(torch::kFloat64), layer.lora_A.to(torch::kFloat64)) *
      layer.lora_scale();
  if (layer.layout() == WeightLayout::kInOut)
    delta = delta.t();  // (in, out), as the weight
  return (layer.weight.to(torch::kFloat64) + delta).to(dtype);
}

std::vector<std::string> merge_lora(torch::nn::Module& module) {
  std::vector<std::string> merged;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    auto* layer = item.value()->as<AdaptedLinear>();
    if (layer == nullptr || !layer->has_lora())
      continue;
    {
      torch::NoGradGuard no_grad;
      layer->weight.copy_(merged_lora_weight(*layer, layer->weight.scalar_type()));
    }
    layer->unregister_module("lora_A");
    layer->unregister_module("lora_B");
    layer->lora_A = torch::Tensor();
    layer->lora_B = torch::Tensor();
    merged.push_back(item.key());
  }
  return merged;
}

}  // namespace bigbatch::nn
