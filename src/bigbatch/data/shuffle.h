// Deterministic per-epoch shuffling of sample indices.
#pragma once

#include <cstdint>
#include <vector>

namespace bigbatch::data {

/// A permutation of [0, n) that depends only on (n, seed, epoch) and is the same on every
/// platform and standard library: a Fisher-Yates shuffle driven by std::mt19937_64 seeded with
/// seed ^ (0x9E3779B97F4A7C15 * (epoch + 1)) (unsigned, wrapping), drawing with an unbiased
/// rejection method instead of std::uniform_int_distribution, whose algorithm is unspecified.
/// Throws InputError when n < 0. Usage:
///   for (int64_t epoch = 0; epoch < epochs; ++epoch)
///     for (int64_t index : epoch_permutation(dataset.size(), seed, epoch)) ...
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace bigbatch::data
