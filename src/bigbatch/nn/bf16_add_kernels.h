// A CPU kernel that widens bfloat16 values into float32 and adds them to float32 values in one
// pass: how a bf16 weight gradient joins its float32 .grad (nn/direct_weight_grads) and a block's
// bf16 product joins its float32 residual stream, without a float32 copy of the bf16 values.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace bigbatch::nn::kernels {

/// dst[i] = base[i] + float(src[i]) for i < count (`base` may be `dst`: an add in place), or
/// dst[i] = float(src[i]) where `base` is nullptr. Each bf16 value is widened exactly, so the sums
/// are bitwise those of a cast to float32 and an add. On the OpenMP threads.
void add_bf16_to_float(const c10::BFloat16* src, const float* base, float* dst, int64_t count);

}  // namespace bigbatch::nn::kernels
