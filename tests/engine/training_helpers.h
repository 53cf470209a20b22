// Shared pieces of the training tests: a sink that records everything, random data, errors.
#pragma once

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/engine/accumulator.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/metrics/sink.h"

namespace bigbatch::testing {

/// Records every window, evaluation and notice.
class RecordingSink : public metrics::MetricsSink {
 public:
  void on_window(const metrics::WindowRecord& r) override { windows.push_back(r); }
  void on_eval(const metrics::EvalRecord& r) override { evals.push_back(r); }
  void on_notice(const std::string& message) override { notices.push_back(message); }
  std::vector<metrics::WindowRecord> windows;
  std::vector<metrics::EvalRecord> evals;
  std::vector<std::string> notices;
};

/// Records the window events a trainer reports: "begin", "step" (stepped) or "skip".
class RecordingHooks : public engine::WindowHooks {
 public:
  void on_window_begin() override { events.push_back("begin"); }
  void on_window_end(bool stepped) override { events.push_back(stepped ? "step" : "skip"); }
  std::vector<std::string> events;
};

/// Delegates to another objective but throws c10::OutOfMemoryError on forward call number
/// `fail_at` (1-based; 0: never), as an allocator over its budget would; once only.
class OutOfMemoryOnce : public engine::Objective {
 public:
  OutOfMemoryOnce(engine::Objective& inner, int64_t fail_at) : inner_(inner), fail_at_(fail_at) {}
  engine::LossUnit unit() const override { return inner_.unit(); }
  engine::Counts count(const data::Batch& batch) const override { return inner_.count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override {
    if (++calls_ == fail_at_) {
      C10_THROW_ERROR(OutOfMemoryError, "injected: out of memory in forward");
    }
    return inner_.loss_sum(batch);
  }

 private:
  engine::Objective& inner_;
  int64_t fail_at_;
  std::atomic<int64_t> calls_{0};  // concurrent micro-batches call from several threads
};

/// The trainer's view of the parts every training test builds (the rest stays unset).
inline engine::TrainingSetup setup_of(torch::nn::Module& model, engine::Objective& objective,
                                      torch::optim::Optimizer& optimizer,
                                      const engine::LrSchedule& schedule, const engine::Plan& plan,
                                      const data::Dataset& train_data) {
  engine::TrainingSetup setup;
  setup.model = &model;
  setup.objective = &objective;
  setup.optimizer = &optimizer;
  setup.schedule = &schedule;
  setup.plan = &plan;
  setup.train_data = &train_data;
  return setup;
}

/// Every parameter of `module`, flattened and concatenated: a copy.
inline torch::Tensor flat_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& parameter : module.parameters())
    flat.push_back(parameter.detach().flatten().clone());
  return torch::cat(flat);
}

/// `n` random bytes from a fixed seed.
inline std::vector<uint8_t> random_bytes(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor t = torch::randint(0, 256, {n}, torch::kLong);
  std::vector<uint8_t> bytes(n);
  for (int64_t i = 0; i < n; ++i)
    bytes[i] = static_cast<uint8_t>(t[i].item<int64_t>());
  return bytes;
}

/// Runs `action` and returns the engine::NonFiniteError it must throw (a test failure, and an
/// error with step -1, when it throws none).
template <typename Action>
engine::NonFiniteError nonfinite_error_of(Action action) {
  try {
    action();
  } catch (const engine::NonFiniteError& error) {
    return error;
  }
  ADD_FAILURE() << "expected engine::NonFiniteError";
  return engine::NonFiniteError("", -1);
}

}  // namespace bigbatch::testing
