// CPU kernels that widen bfloat16 values into float32 and add them to float32 values in one
// pass: how a bf16 weight gradient joins its float32 .grad (nn/direct_weight_grads), a block's
// bf16 product joins its float32 residual stream, and the bf16 input gradients of several products
// of one input become its float32 gradient (nn/bf16_linear), without a float32 copy of each.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <vector>

namespace bigbatch::nn::kernels {

/// dst[i] = base[i] + float(src[i]) for i < count (`base` may be `dst`: an add in place), or
/// dst[i] = float(src[i]) where `base` is nullptr. Each bf16 value is widened exactly, so the sums
/// are bitwise those of a cast to float32 and an add. On the OpenMP threads.
void add_bf16_to_float(const c10::BFloat16* src, const float* base, float* dst, int64_t count);

/// dst[i] = ((float(parts[0][i]) + float(parts[1][i])) + ...) for i < count, summed in the order
/// of `parts` (at least one): bitwise what widening each part and adding them one by one in that
/// order gives, in one pass over dst (in blocks that stay in L1). On the OpenMP threads.
void sum_bf16_to_float(const std::vector<const c10::BFloat16*>& parts, float* dst, int64_t count);

}  // namespace bigbatch::nn::kernels
