#include "bigbatch/models/mlp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/models/model_info.h"
#include "support/test_support.h"

namespace bigbatch::models {
namespace {

using bigbatch::testing::input_error_of;

/// Random byte windows: (batch, context) int64 in [0, vocab).
torch::Tensor random_inputs(int64_t batch, const MlpOptions& options) {
  return torch::randint(options.vocab(), {batch, options.context()}, torch::kLong);
}

TEST(Mlp, ForwardGivesOneRowOfVocabLogitsPerWindow) {
  torch::manual_seed(0);
  const auto options = MlpOptions().vocab(50).context(5).embed(6).hidden(7).layers(3);
  Mlp model(options);
  const torch::Tensor logits = model->forward(random_inputs(4, options));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 50}));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

TEST(Mlp, NamedParametersMatchThePythonMirror) {
  Mlp model(MlpOptions().layers(2));
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters())
    names.push_back(item.key());
  const std::vector<std::string> expected = {"tok_embed.weight", "hidden.0.weight", "hidden.0.bias",
                                             "hidden.1.weight",  "hidden.1.bias",   "head.weight",
                                             "head.bias"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(model->named_parameters()["hidden.0.weight"].sizes(),
            (std::vector<int64_t>{256, 8 * 32}));
  EXPECT_EQ(model->named_parameters()["hidden.1.weight"].sizes(), (std::vector<int64_t>{256, 256}));
}

TEST(Mlp, ParameterCountMatchesHandComputation) {
  // embed 10*4, hidden.0 (3*4)*5+5, hidden.1 5*5+5, head 5*10+10.
  Mlp small(MlpOptions().vocab(10).context(3).embed(4).hidden(5).layers(2));
  EXPECT_EQ(parameter_count(*small), 10 * 4 + (12 * 5 + 5) + (5 * 5 + 5) + (5 * 10 + 10));
  EXPECT_EQ(parameter_count(*small), 195);
  // Defaults: 256*32 + (256*256+256) + (256*256+256) + (256*256+256).
  Mlp defaults;
  EXPECT_EQ(parameter_count(*defaults), 205568);
}

TEST(Mlp, Float64ForwardMatchesFloat32) {
  torch::manual_seed(1);
  const MlpOptions options;
  Mlp model(options);
  const torch::Tensor inputs = random_inputs(8, options);
  const torch::Tensor logits32 = model->forward(inputs);
  model->to(torch::kFloat64);
  const torch::Tensor logits64 = model->forward(inputs);
  EXPECT_EQ(logits64.scalar_type(), torch::kFloat64);
  EXPECT_LT(testing::relative_difference(logits32.to(torch::kFloat64), logits64), 1e-5);
}

TEST(Mlp, ForwardIsDeterministicWithoutDropout) {
  torch::manual_seed(2);
  const MlpOptions options;
  Mlp model(options);
  model->train();
  const torch::Tensor inputs = random_inputs(8, options);
  EXPECT_TRUE(torch::equal(model->forward(inputs), model->forward(inputs)));
}

TEST(Mlp, DropoutActsOnlyInTrainMode) {
  torch::manual_seed(3);
  const auto options = MlpOptions().dropout(0.5);
  Mlp model(options);
  const torch::Tensor inputs = random_inputs(8, options);
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(inputs), model->forward(inputs)));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(inputs), model->forward(inputs)));
}

TEST(Mlp, WrongInputShapeNamesReceivedAndExpected) {
  Mlp model(MlpOptions().context(8));
  const std::string wrong_width = input_error_of([&] {
    model->forward(torch::zeros({4, 7}, torch::kLong));
  });
  EXPECT_NE(wrong_width.find("[4, 7]"), std::string::npos) << wrong_width;
  EXPECT_NE(wrong_width.find("(B, 8)"), std::string::npos) << wrong_width;
  const std::string wrong_rank =
      input_error_of([&] { model->forward(torch::zeros({8}, torch::kLong)); });
  EXPECT_NE(wrong_rank.find("[8]"), std::string::npos) << wrong_rank;
  const std::string wrong_dtype = input_error_of([&] {
    model->forward(torch::zeros({2, 8}, torch::kFloat32));
  });
  EXPECT_NE(wrong_dtype.find("int64"), std::string::npos) << wrong_dtype;
}

TEST(Mlp, InvalidOptionsNameFieldAndValue) {
  const std::string layers = input_error_of([] { Mlp(MlpOptions().layers(-3)); });
  EXPECT_NE(layers.find("MlpOptions.layers"), std::string::npos) << layers;
  EXPECT_NE(layers.find("-3"), std::string::npos) << layers;
  const std::string dropout = input_error_of([] { Mlp(MlpOptions().dropout(1.5)); });
  EXPECT_NE(dropout.find("MlpOptions.dropout"), std::string::npos) << dropout;
  EXPECT_NE(dropout.find("1.5"), std::string::npos) << dropout;
  const std::string context = input_error_of([] { Mlp(MlpOptions().context(0)); });
  EXPECT_NE(context.find("MlpOptions.context"), std::string::npos) << context;
}

}  // namespace
}  // namespace bigbatch::models
