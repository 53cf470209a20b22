// What the C++ benchmarks share: the time one call takes, and the median of repetitions.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace bigbatch::bench {

/// Milliseconds `run` takes.
inline double time_ms(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

/// The median of `values` (the upper one of an even count).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace bigbatch::bench
