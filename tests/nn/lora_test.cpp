// LoRA adapters: an adapter starts as a no-op, computes W x + b + (alpha / r) B A x, freezes the
// rest of the model, and every targeting mistake is named.
#include "bigbatch/nn/lora.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/precision.h"
#include "memory/tracker_fixture.h"
#include "nn/scoped_setting.h"
#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

/// Two adaptable layers and a plain head: `proj.q`, `proj.v`, `head`.
struct TinyModelImpl : torch::nn::Module {
  TinyModelImpl() {
    auto proj = register_module("proj", std::make_shared<torch::nn::Module>());
    q = proj->register_module("q", AdaptedLinear(6, 4, true));
    v = proj->register_module("v", AdaptedLinear(6, 4, false, WeightLayout::kInOut));
    head = register_module("head", torch::nn::Linear(4, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head->forward(q->forward(x) + v->forward(x));
  }
  AdaptedLinear q{nullptr}, v{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(TinyModel);

TEST(Lora, AnAdapterStartsAsANoOpThenAddsScaledBA) {
  torch::manual_seed(1);
  TinyModel model;
  model->to(torch::kFloat64);
  const torch::Tensor x = torch::randn({5, 6}, torch::kFloat64);
  const torch::Tensor before = model->forward(x).detach();
  const auto adapted = apply_lora(*model, LoraOptions().rank(2).alpha(8).targets({"q", "proj.v"}));
  EXPECT_EQ(adapted, (std::vector<std::string>{"proj.q", "proj.v"}));
  EXPECT_TRUE(torch::equal(model->forward(x), before));  // B starts at zero
  EXPECT_EQ(model->q->lora_A.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(model->q->lora_B.sizes(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(model->q->lora_A.scalar_type(), torch::kFloat64);
  torch::NoGradGuard no_grad;
  model->q->lora_B.normal_();
  const torch::Tensor expected =
      torch::matmul(x, model->q->weight.t()) + model->q->bias +
      4.0 * torch::matmul(torch::matmul(x, model->q->lora_A.t()), model->q->lora_B.t());
  EXPECT_LE(testing::relative_difference(model->q->forward(x), expected), 1e-14);
  // The (in, out) layout: W stored transposed.
  EXPECT_LE(testing::relative_difference(model->v->forward(x), torch::matmul(x, model->v->weight)),
            1e-14);
}

TEST(Lora, OnlyAdaptersAndTheNamedTrainableModulesTrain) {
  TinyModel model;
  apply_lora(*model, LoraOptions().rank(2).targets({"q"}).trainable({"head"}));
  std::vector<std::string> trainable;
  for (const auto& item : model->named_parameters()) {
    if (item.value().requires_grad())
      trainable.push_back(item.key());
  }
  EXPECT_EQ(trainable, (std::vector<std::string>{"proj.q.lora_A.weight", "proj.q.lora_B.weight",
                                                 "head.weight", "head.bias"}));
  model->forward(torch::randn({3, 6})).sum().backward();
  EXPECT_FALSE(model->q->weight.grad().defined());
  EXPECT_FALSE(model->v->weight.grad().defined());
  EXPECT_TRUE(model->q->lora_B.grad().defined());
  EXPECT_TRUE(model->head->weight.grad().defined());
}

TEST(Lora, TargetingMistakesAreNamed) {
  TinyModel model;
  EXPECT_EQ(testing::input_error_of([&] { apply_lora(*model, LoraOptions().targets({"k"})); }),
            "LoraOptions.targets: \"k\" names no module of the model (layers that take one: "
            "proj.q, proj.v)");
  EXPECT_EQ(testing::input_error_of([&] {
              apply_lora(*model, LoraOptions().targets({"q"}).trainable({"classifier"}));
            }),
            "LoraOptions.trainable: \"classifier\" names no module of the model");
  EXPECT_EQ(testing::input_error_of([&] { apply_lora(*model, LoraOptions().targets({"head"})); }),
            "LoraOptions.targets: module \"head\" is not a linear layer that takes an adapter");
  EXPECT_EQ(testing::input_error_of([&] { apply_lora(*model, LoraOptions()); }),
            "LoraOptions.targets names no module to adapt");
  EXPECT_EQ(
      testing::input_error_of([&] { apply_lora(*model, LoraOptions().rank(0).targets({"q"})); }),
      "LoraOptions.rank = 0 must be >= 1");
  // Every refusal above left the model as it was: nothing frozen, no adapter.
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(item.value().requires_grad()) << item.key();
  EXPECT_FALSE(model->q->has_lora());
  apply_lora(*model, LoraOptions().targets({"q"}));
  EXPECT_EQ(testing::input_error_of([&] { apply_lora(*model, LoraOptions().targets({"q"})); }),
            "LoraOptions.targets: module \"proj.q\" has a LoRA adapter already");
}

TEST(Lora, FrozenWeightsStoredInBf16ComputeAsTheirRoundedValues) {
  torch::manual_seed(3);
  TinyModel model;
  apply_lora(*model, LoraOptions().rank(2).targets({"q", "v"}));
  const torch::Tensor x = torch::randn({5, 6});
  // The same model with its adapted layers' frozen weights rounded to bf16, kept in float32.
  TinyModel rounded;
  {
    torch::NoGradGuard no_grad;
    apply_lora(*rounded, LoraOptions().rank(2).targets({"q", "v"}));
    const auto from = model->named_parameters();
    for (auto& item : rounded->named_parameters()) {
      const torch::Tensor source = from[item.key()];
      const bool base = item.key().rfind("proj.", 0) == 0 && !source.requires_grad();
      item.value().copy_(base ? source.to(torch::kBFloat16).to(torch::kFloat) : source);
    }
  }
  const int64_t freed = store_frozen_weights(*model, torch::kBFloat16);
  EXPECT_EQ(freed, (4 * 6 + 4 + 6 * 4) * 2);  // q's weight and bias, v's weight: 4 bytes -> 2
  EXPECT_EQ(model->q->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(model->q->bias.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(model->q->lora_A.scalar_type(), torch::kFloat);     // adapters stay float32
  EXPECT_EQ(model->head->weight.scalar_type(), torch::kFloat);  // not an adapted layer
  {
    torch::NoGradGuard no_grad;  // a trained B, so that the adapter contributes
    model->q->lora_B.normal_();
    rounded->q->lora_B.copy_(model->q->lora_B);
  }
  const torch::Tensor y = model->forward(x);
  EXPECT_TRUE(torch::allclose(y, rounded->forward(x), 1e-6, 1e-6));
  y.sum().backward();
  EXPECT_TRUE(model->q->lora_B.grad().defined());
  EXPECT_FALSE(model->q->weight.grad().defined());
  EXPECT_THROW(store_frozen_weights(*model, torch::kFloat64), InputError);
}

TEST(Lora, FrozenBf16WeightsGiveTheInputGradientOfTheirRoundedValues) {
  for (const WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    torch::manual_seed(4);
    AdaptedLinear narrow(6, 4, /*bias=*/true, layout);
    AdaptedLinear rounded(6, 4, /*bias=*/true, layout);
    {
      torch::NoGradGuard no_grad;
      for (AdaptedLinear* layer : {&narrow, &rounded}) {
        (*layer)->weight.requires_grad_(false);
        (*layer)->bias.requires_grad_(false);
      }
      rounded->weight.copy_(narrow->weight.to(torch::kBFloat16).to(torch::kFloat));
      rounded->bias.copy_(narrow->bias.to(torch::kBFloat16).to(torch::kFloat));
      narrow->weight.set_data(narrow->weight.to(torch::kBFloat16));  // as store_frozen_weights
      narrow->bias.set_data(narrow->bias.to(torch::kBFloat16));
    }
    const torch::Tensor x = torch::randn({2, 3, 6}, torch::requires_grad());
    const torch::Tensor x2 = x.detach().clone().requires_grad_();
    const torch::Tensor dy = torch::randn({2, 3, 4});
    const torch::Tensor y = narrow->forward(x);
    EXPECT_TRUE(torch::allclose(y, rounded->forward(x2), 1e-6, 1e-6));
    y.backward(dy);
    rounded->forward(x2).backward(dy);
    EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 1e-6, 1e-6));
    EXPECT_FALSE(narrow->weight.grad().defined());
  }
}

class LoraMemory : public testing::TrackerTest {};

TEST_F(LoraMemory, AFrozenBf16WeightIsNotKeptWidenedForBackward) {
  torch::manual_seed(6);
  AdaptedLinear layer(256, 512, /*bias=*/false);
  {
    torch::NoGradGuard no_grad;
    layer->weight.requires_grad_(false);
    layer->weight.set_data(layer->weight.to(torch::kBFloat16));  // as store_frozen_weights
  }
  const torch::Tensor x = torch::randn({1, 256}, torch::requires_grad());
  const int64_t before = tracker().current_bytes();
  torch::Tensor y = layer->forward(x);  // (1, 512)
  const int64_t kept = tracker().current_bytes() - before;
  EXPECT_LT(kept, 256 * 512 * 4 / 2);  // far less than a float32 copy of the weight (512 KiB)
  y.sum().backward();
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(Lora, LayersBuiltUnderALinearStorageScopeAreNarrowFromTheStart) {
  torch::manual_seed(5);
  TinyModel wide;
  apply_lora(*wide, LoraOptions().rank(2).targets({"q", "v"}));
  store_frozen_weights(*wide, torch::kBFloat16);
  torch::manual_seed(5);  // the same draws, narrowed at construction
  TinyModel narrow{nullptr};
  {
    const LinearStorageScope scope(torch::kBFloat16);
    narrow = TinyModel();
  }
  EXPECT_EQ(narrow->q->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(narrow->q->bias.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(narrow->head->weight.scalar_type(), torch::kFloat);  // not an AdaptedLinear
  // Adapters on narrow weights train in float32, and are drawn as before.
  apply_lora(*narrow, LoraOptions().rank(2).targets({"q", "v"}));
  EXPECT_EQ(narrow->q->lora_A.scalar_type(), torch::kFloat);
  const auto expected = wide->named_parameters();
  for (const auto& item : narrow->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), expected[item.key()].scalar_type()) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
    EXPECT_EQ(item.value().requires_grad(), expected[item.key()].requires_grad()) << item.key();
  }
  EXPECT_EQ(store_frozen_weights(*narrow, torch::kBFloat16), 0);  // nothing left to narrow
  {
    const LinearStorageScope outer(torch::kBFloat16);
    {
      const LinearStorageScope inner(torch::kHalf);
      EXPECT_EQ(AdaptedLinear(2, 2, true)->weight.scalar_type(), torch::kHalf);
    }
    EXPECT_EQ(AdaptedLinear(2, 2, true)->bias.scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(AdaptedLinear(2, 2, true)->weight.scalar_type(), torch::kFloat);
  EXPECT_THROW(LinearStorageScope(torch::kFloat64), InputError);
}

TEST(Lora, LayersOfOneInputRunAsOneNodeOnlyWithoutAdapters) {
  const testing::ScopedSetting<Bf16Matmul> matmul{bf16_matmul, set_bf16_matmul,
                                                  Bf16Matmul::kNative};
  torch::manual_seed(23);
  AdaptedLinear first(48, 32, /*bias=*/false), second(48, 16, /*bias=*/false);
  const torch::Tensor x = torch::randn({3, 48});
  // One node for all: every output's grad_fn is the same Bf16LinearsFunction.
  const auto one_node = [&](const std::vector<torch::Tensor>& outputs) {
    return outputs[0].grad_fn() == outputs[1].grad_fn() &&
           outputs[0].grad_fn()->name().find("Bf16LinearsFunction") != std::string::npos;
  };
  const AutocastGuard autocast(Precision::kBf16, torch::kCPU);
  std::vector<torch::Tensor> grouped = adapted_linears(x, {first.get(), second.get()});
  EXPECT_TRUE(one_node(grouped));
  EXPECT_TRUE(grouped[0].equal(first->forward(x)));
  EXPECT_TRUE(grouped[1].equal(second->forward(x)));

  second->add_lora(/*rank=*/2, /*alpha=*/4.0, /*dropout=*/0.0);
  second->lora_B.data().normal_();  // the adapter now changes the output
  const std::vector<torch::Tensor> each = adapted_linears(x, {first.get(), second.get()});
  EXPECT_FALSE(one_node(each));
  EXPECT_TRUE(each[0].equal(first->forward(x)));
  EXPECT_TRUE(each[1].equal(second->forward(x)));
  EXPECT_FALSE(each[1].equal(grouped[1]));
}

}  // namespace
}  // namespace bigbatch::nn
