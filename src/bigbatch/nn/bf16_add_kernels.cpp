#include "bigbatch/nn/bf16_add_kernels.h"

#include "bigbatch/nn/row_parts_omp.h"

namespace bigbatch::nn::kernels {
namespace {

/// Values per OpenMP task.
constexpr int64_t kGrain = int64_t(1) << 15;

BB_VECTOR_CLONES
void add_range(const c10::BFloat16* __restrict src, float* __restrict dst, int64_t begin,
               int64_t end, bool assign) {
  if (assign) {
    for (int64_t i = begin; i < end; ++i)
      dst[i] = widen(src[i]);
    return;
  }
  for (int64_t i = begin; i < end; ++i)
    dst[i] += widen(src[i]);
}

}  // namespace

void add_bf16_to_float(const c10::BFloat16* src, float* dst, int64_t count, bool assign) {
  at::parallel_for(0, count, kGrain,
                   [&](int64_t begin, int64_t end) { add_range(src, dst, begin, end, assign); });
}

}  // namespace bigbatch::nn::kernels
