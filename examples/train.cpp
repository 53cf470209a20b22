// A whole training run through the library: a model and data defined here, options built in C++
// (no TOML), and job::TrainingJob doing the rest (plan, run directory, metrics.jsonl,
// TensorBoard events, checkpoints, resume, charts, summary.json).
//   build/examples/example_train [RUN_DIR]     (default: a new runs/spirals-<time>)
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/job/training_job.h"

namespace {

/// Three interleaved spirals in the plane: (2) points, labels 0..2.
class Spirals : public bigbatch::data::Dataset {
 public:
  Spirals(int64_t points_per_class, uint64_t seed) {
    torch::manual_seed(seed);
    const torch::Tensor radius = torch::linspace(0.1, 1.0, points_per_class);  // (P)
    std::vector<torch::Tensor> points, labels;
    for (int64_t c = 0; c < 3; ++c) {
      const torch::Tensor angle = radius * 4.0 + 2.0 * M_PI * static_cast<double>(c) / 3.0 +
                                  0.2 * torch::randn({points_per_class});               // (P)
      points.push_back(torch::stack({radius * angle.cos(), radius * angle.sin()}, 1));  // (P, 2)
      labels.push_back(torch::full({points_per_class}, c, torch::kLong));               // (P)
    }
    points_ = torch::cat(points);  // (N, 2)
    labels_ = torch::cat(labels);  // (N)
  }
  int64_t size() const override { return points_.size(0); }
  bigbatch::data::Batch get(const std::vector<int64_t>& indices) const override {
    const torch::Tensor at = torch::tensor(indices, torch::kLong);
    return {points_.index_select(0, at), labels_.index_select(0, at)};
  }
  std::string describe() const override { return std::to_string(size()) + " points"; }

 private:
  torch::Tensor points_;
  torch::Tensor labels_;
};

/// The model, its data and its loss: built by the job after it seeds torch's generator.
bigbatch::job::Workload spirals_workload() {
  bigbatch::job::Workload w;
  auto model =
      torch::nn::Sequential(torch::nn::Linear(2, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64),
                            torch::nn::Tanh(), torch::nn::Linear(64, 3));
  w.module = model.ptr();
  w.train = std::make_shared<Spirals>(400, 1);
  w.val = std::make_shared<Spirals>(100, 2);
  w.objective = std::make_unique<bigbatch::engine::CrossEntropyObjective>(
      [model](const torch::Tensor& points) mutable { return model->forward(points); },
      bigbatch::engine::LossUnit::kSample);
  w.name = "spirals";
  w.description = "MLP 2 -> 64 -> 64 -> 3 (defined in examples/train.cpp)";
  w.data_description = "three spirals in the plane";
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  bigbatch::job::TrainingJobOptions options;
  options.batch.global_batch(128).micro_batch(16).base_lr(1e-2);  // 8 micro-batches per step
  options.trainer.total_steps(60).eval_every(20).max_grad_norm(1.0).checkpoint_every(30);
  options.optimizer.weight_decay(0.0);
  options.schedule.warmup_steps(5);
  options.run.directory = argc > 1 ? argv[1] : "";
  options.run.log_every = 20;
  bigbatch::job::TrainingJob job(options, spirals_workload);
  const bigbatch::job::JobResult result = job.run(std::cout);
  std::cout << "val accuracy " << result.summary.last_val_accuracy.value_or(0.0) << "\n";
  return result.exit_code;
}
