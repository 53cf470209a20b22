#include "bigbatch/nn/bf16_add_kernels.h"

#include <algorithm>

#include "bigbatch/nn/row_parts_omp.h"

namespace bigbatch::nn::kernels {
namespace {

/// Values per OpenMP task.
constexpr int64_t kGrain = int64_t(1) << 15;

BB_VECTOR_CLONES
void widen_range(const c10::BFloat16* __restrict src, float* __restrict dst, int64_t begin,
                 int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    dst[i] = widen(src[i]);
}

BB_VECTOR_CLONES
void add_in_place_range(const c10::BFloat16* __restrict src, float* __restrict dst, int64_t begin,
                        int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    dst[i] += widen(src[i]);
}

BB_VECTOR_CLONES
void add_range(const c10::BFloat16* __restrict src, const float* __restrict base,
               float* __restrict dst, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    dst[i] = base[i] + widen(src[i]);
}

/// Values sum_bf16_to_float adds up part by part before moving on: 16 KiB of float32.
constexpr int64_t kSumBlock = 4096;

}  // namespace

void sum_bf16_to_float(const std::vector<const c10::BFloat16*>& parts, float* dst, int64_t count) {
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; block += kSumBlock) {
      const int64_t block_end = std::min(end, block + kSumBlock);
      widen_range(parts.front(), dst, block, block_end);
      for (size_t p = 1; p < parts.size(); ++p)
        add_in_place_range(parts[p], dst, block, block_end);
    }
  });
}

void add_bf16_to_float(const c10::BFloat16* src, const float* base, float* dst, int64_t count) {
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    if (base == nullptr)
      widen_range(src, dst, begin, end);
    else if (base == dst)
      add_in_place_range(src, dst, begin, end);
    else
      add_range(src, base, dst, begin, end);
  });
}

}  // namespace bigbatch::nn::kernels
