#include "bigbatch/engine/micro_batch_search.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/memory/device_memory.h"
#include "bigbatch/memory/tracker.h"

namespace bigbatch::engine {

namespace {

/// Runs one trial and records its peak; out of memory is recorded, not thrown.
MicroBatchProbe probe(const std::function<void(int64_t)>& trial, int64_t micro_batch,
                      const MicroBatchSearchOptions& options) {
  MicroBatchProbe result;
  result.micro_batch = micro_batch;
  try {
    // Bytes training will hold that the trial does not (optimizer state): really held here.
    const torch::Tensor reserved = torch::empty(
        {options.reserved_bytes()}, torch::TensorOptions(torch::kUInt8).device(options.device()));
    memory::reset_peak_bytes(options.device());
    trial(micro_batch);
    result.peak_bytes = memory::peak_bytes(options.device());
  } catch (const c10::OutOfMemoryError&) {
    result.out_of_memory = true;
    memory::release_cached_memory(options.device());
  }
  return result;
}

/// The largest size predicted to fit the target share of `budget` on the line fixed + slope x n.
int64_t predict(const MicroBatchSearchOptions& options, int64_t budget, int64_t fixed,
                int64_t slope) {
  const double target = options.target_fraction() * static_cast<double>(budget);
  const double room = target - static_cast<double>(fixed);
  const int64_t size = slope > 0
                           ? static_cast<int64_t>(std::floor(room / static_cast<double>(slope)))
                           : options.global_batch();
  return std::clamp<int64_t>(size, 1, options.global_batch());
}

/// 1. Measure: two probes without a budget give fixed + per-sample bytes.
void measure(const std::function<void(int64_t)>& trial, const MicroBatchSearchOptions& options,
             MicroBatchSearchResult& result) {
  memory::set_budget_bytes(options.device(), 0);
  const int64_t small = 1;
  const int64_t larger = std::min<int64_t>(options.global_batch(), 4);
  const MicroBatchProbe first = probe(trial, small, options);
  result.probes.push_back(first);
  int64_t per_sample = 0;
  if (larger > small) {
    const MicroBatchProbe second = probe(trial, larger, options);
    result.probes.push_back(second);
    per_sample = std::max<int64_t>(1, (second.peak_bytes - first.peak_bytes) / (larger - small));
  }
  result.bytes_per_sample = per_sample;
  result.fixed_bytes = first.peak_bytes - per_sample * small;
}

/// 3. Confirm under the budget, from the prediction `candidate`. A size that fits is a third,
/// distant point on the line: the slope from it and the larger probe predicts again, and a larger
/// prediction is tried next. After running out, try 10% fewer samples (a near miss of a good
/// prediction); after a second miss, halve the distance to the largest size known to fit. A
/// probe whose measured peak is within the budget is known to fit from the start. Returns the
/// largest size that fitted.
int64_t confirm(const std::function<void(int64_t)>& trial, const MicroBatchSearchOptions& options,
                int64_t candidate, MicroBatchSearchResult& result) {
  const int64_t budget = options.budget_bytes();
  memory::set_budget_bytes(options.device(), budget);
  int64_t chosen = 0;
  for (const MicroBatchProbe& measured : result.probes) {
    if (measured.peak_bytes <= budget)
      chosen = std::max(chosen, measured.micro_batch);
  }
  int64_t smallest_failed = options.global_batch() + 1;
  const MicroBatchProbe anchor = result.probes.back();  // a copy: probes grows below
  for (int64_t attempt = 0; attempt < options.max_trials() && candidate > chosen; ++attempt) {
    const MicroBatchProbe tried = probe(trial, candidate, options);
    result.probes.push_back(tried);
    if (tried.out_of_memory) {
      ++result.out_of_memory_trials;
      smallest_failed = candidate;
      candidate =
          result.out_of_memory_trials == 1 ? candidate * 9 / 10 : chosen + (candidate - chosen) / 2;
      candidate = std::max<int64_t>(chosen + 1, candidate);
      if (candidate >= smallest_failed)
        break;
      continue;
    }
    chosen = candidate;
    if (candidate <= anchor.micro_batch)
      break;
    const int64_t slope = std::max<int64_t>(
        1, (tried.peak_bytes - anchor.peak_bytes) / (candidate - anchor.micro_batch));
    candidate =
        std::min(predict(options, budget, anchor.peak_bytes - slope * anchor.micro_batch, slope),
                 smallest_failed - 1);
  }
  return chosen;
}

}  // namespace

MicroBatchSearchResult find_micro_batch(const std::function<void(int64_t)>& trial,
                                        const MicroBatchSearchOptions& options) {
  const c10::Device device = options.device();
  BB_CHECK(!device.is_cpu() || memory::MemoryTracker::instance().installed(),
           "find_micro_batch on the CPU needs the memory tracker installed");
  BB_CHECK_INPUT(options.budget_bytes() > 0,
                 "the micro-batch search needs a memory budget "
                 "(MicroBatchSearchOptions.budget_bytes > 0)");
  BB_CHECK(options.global_batch() > 0, "global batch ", options.global_batch());
  const int64_t budget = options.budget_bytes();
  const int64_t previous_budget = memory::budget_bytes(device);
  MicroBatchSearchResult result;
  measure(trial, options, result);  // 1.
  memory::set_budget_bytes(device, previous_budget);
  const int64_t smallest_peak = result.probes.front().peak_bytes;
  BB_CHECK_INPUT(smallest_peak <= budget, "a micro-batch of 1 needs ", format_bytes(smallest_peak),
                 " of tensor memory (measured), more than the memory budget of ",
                 format_bytes(budget),
                 "; raise the memory budget, use a smaller model or enable checkpointing");
  // 2. Predict the largest size under the target share of the budget.
  result.predicted = predict(options, budget, result.fixed_bytes, result.bytes_per_sample);
  const int64_t chosen = confirm(trial, options, result.predicted, result);  // 3.
  memory::set_budget_bytes(device, previous_budget);
  BB_CHECK(chosen > 0, "the probe of 1 sample fitted, so a size must have been chosen");
  result.micro_batch = chosen;
  return result;
}

std::string MicroBatchSearchResult::describe() const {
  return cat(micro_batch, " (predicted ", predicted, " from ", format_bytes(bytes_per_sample),
             " per sample over ", format_bytes(fixed_bytes), "; ", out_of_memory_trials,
             " out-of-memory trial", out_of_memory_trials == 1 ? "" : "s", ")");
}

}  // namespace bigbatch::engine
