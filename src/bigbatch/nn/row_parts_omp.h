// What the CPU row kernels (batch_norm_kernels.cpp, llama_kernels.cpp, layer_norm_kernels.cpp)
// share: the per-ISA clone attributes, float32 and bfloat16 values read and written as float, the
// split of a (M, C) matrix's rows over LibTorch's OpenMP threads, and the in-order merge of
// per-chunk column sums. Include it only from .cpp files that
// CMakeLists.txt builds with -fopenmp: ATen's at::parallel_for is a header template whose pragma
// does nothing in code built without it, and so would this.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#elif defined(__GNUC__) && !defined(__clang__)
#error "row_parts_omp.h needs -fopenmp: add this file to the OpenMP list in CMakeLists.txt"
#endif

#include "bigbatch/nn/row_shape.h"

// The loops of the row kernels are written for the compiler to vectorise; GCC on x86-64 builds
// each one for AVX-512, AVX2 and the baseline and picks one per machine when the program loads.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define BB_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define BB_INLINE inline __attribute__((always_inline))
#else
#define BB_VECTOR_CLONES
#define BB_INLINE inline
#endif

namespace bigbatch::nn::kernels {

/// Rows a chunked reduction sums in float before the partial result joins a wider accumulator:
/// 64 rows of 64 channels are 16 KiB, still in L1 for a second pass over them.
constexpr int64_t kChunkRows = 64;

/// The chunks of kChunkRows that `rows` rows make, the last one possibly short.
inline int64_t chunk_count(int64_t rows) {
  return (rows + kChunkRows - 1) / kChunkRows;
}

/// A value as float: itself, or a bfloat16's bits widened (exact).
BB_INLINE float widen(float x) {
  return x;
}
BB_INLINE float widen(c10::BFloat16 x) {
  const uint32_t bits = uint32_t(x.x) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// `x` stored as float, or rounded to the nearest even bfloat16 (NaN to the quiet NaN 0x7FC0), as
/// c10::BFloat16's conversion rounds, in a form the compiler vectorises.
BB_INLINE void store(float* out, float x) {
  *out = x;
}
BB_INLINE void store(c10::BFloat16* out, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  out->x = x == x ? uint16_t(rounded) : uint16_t(0x7FC0);
}

/// The row of chunk_sums (chunks, C) that the chunk starting at row `first` sums into, zeroed, or
/// nullptr where chunk_sums is (no sums wanted).
BB_INLINE float* zeroed_chunk_sums(float* chunk_sums, int64_t first, int64_t channels) {
  if (chunk_sums == nullptr)
    return nullptr;
  float* sums = chunk_sums + (first / kChunkRows) * channels;
  std::fill(sums, sums + channels, 0.0f);
  return sums;
}

/// sums[c] += row[c] widened for c < channels: one row's part of a chunk's column sums, the rows
/// added one after another in this order by every kernel whose sums must agree bitwise.
template <typename T>
BB_INLINE void add_row_to_sums(const T* __restrict row, float* __restrict sums, int64_t channels) {
#pragma omp simd
  for (int64_t c = 0; c < channels; ++c)
    sums[c] += widen(row[c]);
}

/// out (C) = the sums over the chunks of chunk_sums (chunks, C), the chunks in order in double:
/// how the kernels' column sums merge their per-chunk float sums independently of the threads.
inline void sum_chunks_in_order(const float* chunk_sums, int64_t chunks, int64_t channels,
                                float* out) {
  std::vector<double> total(size_t(channels), 0.0);
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const float* row = chunk_sums + chunk * channels;
    for (int64_t c = 0; c < channels; ++c)
      total[size_t(c)] += double(row[c]);
  }
  for (int64_t c = 0; c < channels; ++c)
    out[c] = float(total[size_t(c)]);
}

/// Values below which a pass runs on the calling thread alone instead of paying for a fork and
/// join of the OpenMP threads.
constexpr int64_t kParallelValues = 16384;

/// Rows [begin, end) of part `part` of `parts`: contiguous, in whole chunks but for the last.
inline std::pair<int64_t, int64_t> rows_of_part(int64_t rows, int64_t part, int64_t parts) {
  const int64_t chunks = chunk_count(rows);
  const int64_t per_part = (chunks + parts - 1) / parts;
  return {std::min(rows, part * per_part * kChunkRows),
          std::min(rows, (part + 1) * per_part * kChunkRows)};
}

/// Splits the rows of `shape` into one contiguous part per OpenMP thread of the calling thread's
/// team (LibTorch's count for this thread, at::get_num_threads()), or a single part for fewer
/// than kParallelValues values, and runs `work(part, begin, end)` for each on its own thread.
/// Returns the number of parts, at most at::get_num_threads(); the split depends on the shape
/// and the team size only, and falls on chunk boundaries, so results per part or per chunk merge
/// in a fixed order. The team size is left to the thread's own setting (no num_threads clause,
/// as ATen does: GOMP rebuilds its pool when the requested size changes). `work` must not throw.
template <typename Work>
int64_t on_row_parts(RowShape shape, const Work& work) {
  const bool parallel = shape.rows * shape.channels >= kParallelValues && at::get_num_threads() > 1;
#ifdef _OPENMP
  if (parallel && !omp_in_parallel()) {
    int64_t parts = 1;
#pragma omp parallel
    {
      const int64_t part = omp_get_thread_num();
      const int64_t team = omp_get_num_threads();
      if (part == 0)
        parts = team;
      const auto [begin, end] = rows_of_part(shape.rows, part, team);
      work(part, begin, end);
    }
    return parts;
  }
#endif
  (void)parallel;
  work(0, 0, shape.rows);
  return 1;
}

/// on_row_parts with column sums: runs work(begin, end, chunk_sums) for each part, chunk_sums a
/// (chunks, C) buffer into which each chunk of rows sums its columns (zeroed_chunk_sums), then
/// merges the chunks in order into sums (C) (sum_chunks_in_order). Where sums is nullptr, so is
/// chunk_sums and nothing is summed.
template <typename Work>
void on_row_parts_with_column_sums(RowShape shape, float* sums, const Work& work) {
  const int64_t chunks = chunk_count(shape.rows);
  std::vector<float> chunk_sums(sums != nullptr ? size_t(chunks * shape.channels) : 0);
  float* partial = sums != nullptr ? chunk_sums.data() : nullptr;
  on_row_parts(shape, [&](int64_t, int64_t begin, int64_t end) { work(begin, end, partial); });
  if (sums != nullptr)
    sum_chunks_in_order(partial, chunks, shape.channels, sums);
}

}  // namespace bigbatch::nn::kernels
