// bigbatch's accumulation core inside a plain LibTorch loop: a global batch of 100 samples run as
// micro-batches of 32 + 32 + 32 + 4, with the same gradient as the whole batch at once.
//   build/examples/example_accumulate
#include <torch/torch.h>

#include <iostream>

#include "bigbatch/engine/accumulator.h"

int main() {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(10, 32), torch::nn::Tanh(),
                              torch::nn::Linear(32, 1));
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  const bigbatch::engine::LrSchedule schedule(
      bigbatch::engine::LrScheduleOptions().peak_lr(1e-2).warmup_steps(5).total_steps(50));
  bigbatch::engine::GradientAccumulator accumulator(
      model->parameters(), optimizer, &schedule,
      bigbatch::engine::AccumulatorOptions().max_grad_norm(1.0));

  const torch::Tensor x = torch::randn({100, 10});           // (N, 10)
  const torch::Tensor y = x.sum(1, /*keepdim=*/true).sin();  // (N, 1)
  const int64_t micro_batch = 32;
  for (int step = 0; step < 50; ++step) {
    accumulator.begin_window({/*samples=*/100, /*tokens=*/100});
    for (int64_t begin = 0; begin < 100; begin += micro_batch) {
      const int64_t end = std::min<int64_t>(begin + micro_batch, 100);
      const torch::Tensor prediction = model->forward(x.slice(0, begin, end));  // (b, 1)
      const torch::Tensor loss_sum =                                            // summed, not mean
          torch::mse_loss(prediction, y.slice(0, begin, end), torch::Reduction::Sum);
      accumulator.backward(loss_sum, {end - begin, end - begin});
    }
    const bigbatch::engine::WindowResult result = accumulator.step();  // clip, lr, step, zero
    if (result.step % 10 == 0) {
      std::cout << "step " << result.step << "  loss " << result.mean_loss << "  lr " << result.lr
                << "  grad_norm " << result.grad_norm << "  micro-batches " << result.micro_batches
                << "\n";
    }
  }
  return 0;
}
