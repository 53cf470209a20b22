// Against real Python PyTorch: tests/golden/make_golden.py runs the standard accumulation loop
// (torch 1.13, float64) and records the window gradient and the weights after AdamW steps.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/models/mlp.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

torch::Tensor to_tensor(const nlohmann::json& values) {
  return torch::tensor(values.get<std::vector<double>>(), torch::kFloat64);
}

TEST(GoldenPyTorch, WindowGradientAndAdamWStepsMatchTheStandardLoop) {
  const nlohmann::json golden = nlohmann::json::parse(
      testing::read_file(std::string(BIGBATCH_TEST_DATA_DIR) + "/golden/golden_mlp_adamw.json"));
  const nlohmann::json& o = golden["options"];
  models::Mlp model(models::MlpOptions()
                        .context(o["context"])
                        .embed(o["embed"])
                        .hidden(o["hidden"])
                        .layers(o["layers"]));
  model->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      ASSERT_TRUE(golden["initial"].contains(item.key())) << item.key();
      item.value().copy_(to_tensor(golden["initial"][item.key()]).view_as(item.value()));
    }
  }
  engine::CrossEntropyObjective objective(engine::forward_of(model), engine::LossUnit::kSample);
  auto optimizer = engine::make_optimizer(*model, engine::OptimizerOptions()
                                                      .lr(o["lr"])
                                                      .weight_decay(o["weight_decay"])
                                                      .beta1(o["beta1"])
                                                      .beta2(o["beta2"])
                                                      .eps(o["eps"]));
  const engine::LrSchedule schedule(engine::LrScheduleOptions()
                                        .peak_lr(o["lr"])
                                        .warmup_steps(o["warmup_steps"])
                                        .total_steps(o["steps"])
                                        .min_lr_ratio(o["min_lr_ratio"]));
  engine::GradientAccumulator accumulator(
      model->parameters(), *optimizer, &schedule,
      engine::AccumulatorOptions().max_grad_norm(o["max_grad_norm"]));

  const int64_t global = o["global_batch"];
  const int64_t micro = o["micro_batch"];
  for (int64_t step = 0; step < o["steps"].get<int64_t>(); ++step) {
    std::vector<int64_t> flat_inputs;
    for (const auto& row : golden["inputs"][step]) {
      for (int64_t v : row.get<std::vector<int64_t>>())
        flat_inputs.push_back(v);
    }
    const torch::Tensor x = torch::tensor(flat_inputs, torch::kLong).view({global, -1});
    const torch::Tensor y =
        torch::tensor(golden["targets"][step].get<std::vector<int64_t>>(), torch::kLong);
    accumulator.begin_window({global, global});
    for (int64_t begin = 0; begin < global; begin += micro) {
      const data::Batch part{x.slice(0, begin, begin + micro), y.slice(0, begin, begin + micro)};
      accumulator.backward(objective.loss_sum(part), objective.count(part));
    }
    if (step == 0) {
      for (auto& item : model->named_parameters()) {
        const torch::Tensor expected = to_tensor(golden["first_window_grad"][item.key()]);
        EXPECT_LE(testing::relative_difference(item.value().grad().flatten(), expected), 1e-12)
            << item.key();
      }
    }
    const engine::WindowResult result = accumulator.step();
    EXPECT_NEAR(result.grad_norm, golden["grad_norms"][step].get<double>(), 1e-12);
    EXPECT_DOUBLE_EQ(result.lr, golden["lrs"][step].get<double>());
    EXPECT_NEAR(result.mean_loss, golden["losses"][step].get<double>(), 1e-12);
    if (step == 0) {
      for (auto& item : model->named_parameters()) {
        EXPECT_LE(testing::relative_difference(item.value().detach().flatten(),
                                               to_tensor(golden["after_first_step"][item.key()])),
                  1e-12)
            << item.key();
      }
    }
  }
  for (auto& item : model->named_parameters()) {
    EXPECT_LE(testing::relative_difference(item.value().detach().flatten(),
                                           to_tensor(golden["final"][item.key()])),
              1e-10)
        << item.key();
  }
}

}  // namespace
}  // namespace bigbatch
