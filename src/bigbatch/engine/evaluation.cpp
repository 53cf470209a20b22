#include "bigbatch/engine/evaluation.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/engine/window_sampler.h"
#include "bigbatch/nn/mode_guard.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::engine {

metrics::EvalRecord evaluate(const EvaluationInput& input) {
  BB_CHECK(input.model && input.objective && input.data && input.communicator,
           "evaluate() is missing a part");
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  nn::ModeGuard eval_mode(*input.model, false);
  // The weights do not change while evaluating: the compute-dtype copies are made once, not once
  // per batch (nn/weight_copies.h).
  const nn::WeightCopyScope weight_copies;
  const data::Dataset& val = *input.data;
  const c10::Device device = device_of(*input.model);
  const int64_t available = val.size();
  const int64_t count = input.samples > 0 ? std::min(input.samples, available) : available;
  double loss_sum = 0.0;
  int64_t correct = 0;  // -1 once a batch has no notion of a correct prediction
  Counts total;
  dist::Communicator& communicator = *input.communicator;
  const ShardRange shard = shard_range(count, communicator.rank(), communicator.world_size());
  for (int64_t begin = shard.begin; begin < shard.end; begin += input.batch) {
    std::vector<int64_t> indices(std::min(input.batch, shard.end - begin));
    std::iota(indices.begin(), indices.end(), begin);
    const data::Batch batch = val.get(indices);
    total += input.objective->count(batch);
    const EvalSums sums = input.objective->evaluate(data::to_device(batch, device));
    loss_sum += sums.loss_sum.item<double>();
    correct = (correct < 0 || sums.correct < 0) ? -1 : correct + sums.correct;
  }
  {
    // Summed over the ranks, (5) float64: loss sum, correct predictions, samples, tokens, ranks
    // without accuracy.
    torch::Tensor sums =
        torch::tensor({loss_sum, static_cast<double>(std::max<int64_t>(correct, 0)),
                       static_cast<double>(total.samples), static_cast<double>(total.tokens),
                       correct < 0 ? 1.0 : 0.0},
                      torch::kFloat64);
    communicator.all_reduce(sums, dist::Traffic::kControl, "all-reduce of the evaluation sums");
    const auto summed = sums.accessor<double, 1>();
    loss_sum = summed[0];
    correct = summed[4] > 0 ? -1 : static_cast<int64_t>(summed[1]);
    total = Counts{static_cast<int64_t>(summed[2]), static_cast<int64_t>(summed[3])};
  }
  const double units =
      static_cast<double>(std::max<int64_t>(1, total.units(input.objective->unit())));
  metrics::EvalRecord record;
  record.step = input.step;
  record.loss = loss_sum / units;
  if (correct >= 0)
    record.accuracy = static_cast<double>(correct) / units;
  record.samples = total.samples;
  record.tokens = total.tokens;
  record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return record;
}

}  // namespace bigbatch::engine
