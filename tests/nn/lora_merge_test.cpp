// merge_lora: folding adapters into their weights keeps the function, in both weight layouts and
// with a bias, and removes the adapters' tensors.
#include "bigbatch/nn/lora_merge.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/models/model_export.h"

namespace bigbatch::nn {
namespace {

/// An (out, in) layer with a bias, an (in, out) layer with a bias and one without an adapter.
struct MergeModelImpl : torch::nn::Module {
  MergeModelImpl() {
    q = register_module("q", AdaptedLinear(6, 4, true));
    v = register_module("v", AdaptedLinear(4, 5, true, WeightLayout::kInOut));
    out = register_module("out", AdaptedLinear(5, 3, false));
  }
  /// x (N, 6) -> (N, 3)
  torch::Tensor forward(const torch::Tensor& x) {
    return out->forward(torch::tanh(v->forward(torch::tanh(q->forward(x)))));
  }
  AdaptedLinear q{nullptr}, v{nullptr}, out{nullptr};
};
TORCH_MODULE(MergeModel);

/// Draws every lora_B away from zero so that the adapters change the outputs.
void perturb_adapters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    if (item.key().find("lora_B") != std::string::npos)
      item.value().normal_(0.0, 0.5);
  }
}

TEST(LoraMerge, FoldsAdaptersOfBothLayoutsAndRemovesThem) {
  torch::manual_seed(3);
  MergeModel model;
  const auto adapted = apply_lora(*model, LoraOptions().rank(2).alpha(6).targets({"q", "v"}));
  perturb_adapters(*model);
  const torch::Tensor x = torch::randn({7, 6});  // (N, 6)
  const torch::Tensor before = model->forward(x).detach();
  torch::Tensor plain;
  {
    // The same layers without adapters: the adapters must matter for the test to mean anything.
    torch::NoGradGuard no_grad;
    plain = model->out->forward(torch::tanh(torch::nn::functional::linear(
        torch::tanh(torch::nn::functional::linear(x, model->q->weight, model->q->bias)),
        model->v->weight.t(), model->v->bias)));
  }
  EXPECT_GT((plain - before).abs().max().item<double>(), 1e-2);

  EXPECT_EQ(merge_lora(*model), adapted);
  EXPECT_FALSE(model->q->has_lora());
  EXPECT_FALSE(model->v->has_lora());
  const torch::Tensor after = model->forward(x).detach();
  EXPECT_LE((after - before).abs().max().item<double>(), 1e-6);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : models::state_tensors(*model))
    names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"q.weight", "q.bias", "v.weight", "v.bias", "out.weight"}));
  EXPECT_EQ(model->parameters().size(), 5u);
  EXPECT_TRUE(merge_lora(*model).empty());  // nothing left to merge
}

TEST(LoraMerge, MergedWeightKeepsTheLayoutAndTakesTheDtype) {
  torch::manual_seed(4);
  AdaptedLinear layer(3, 2, false, WeightLayout::kInOut);
  layer->add_lora(1, 2.0, 0.0);
  {
    torch::NoGradGuard no_grad;
    layer->lora_B.fill_(0.5);
  }
  const torch::Tensor merged = merged_lora_weight(*layer, torch::kFloat64);  // (in, out)
  ASSERT_EQ(merged.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(merged.scalar_type(), torch::kFloat64);
  const torch::Tensor expected =
      layer->weight.to(torch::kFloat64) +
      2.0 * torch::matmul(layer->lora_B, layer->lora_A).t().to(torch::kFloat64);
  EXPECT_LE((merged - expected).abs().max().item<double>(), 1e-7);
}

}  // namespace
}  // namespace bigbatch::nn
