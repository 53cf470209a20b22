#include "bigbatch/data/shuffle.h"

#include <numeric>
#include <random>
#include <utility>

#include "bigbatch/core/check.h"

namespace bigbatch::data {
namespace {

/// A uniform draw from [0, bound), bound >= 1. Rejects the lowest 2^64 mod bound raw values so
/// that the remaining range is a whole multiple of bound (no modulo bias).
uint64_t bounded_draw(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (uint64_t{0} - bound) % bound;  // == 2^64 mod bound
  for (;;) {
    const uint64_t raw = rng();
    if (raw >= threshold)
      return raw % bound;
  }
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  BB_CHECK_INPUT(n >= 0, "cannot shuffle a negative number of samples: n = ", n);
  const uint64_t mixed = seed ^ (0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(epoch) + 1));
  std::mt19937_64 rng(mixed);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(bounded_draw(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace bigbatch::data
