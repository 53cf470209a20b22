// A CPU kernel that widens bfloat16 values into float32 and adds them to float32 values in one
// pass: how a bf16 weight gradient joins its float32 .grad without the cast's float32 copy
// (nn/direct_weight_grads).
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace bigbatch::nn::kernels {

/// dst[i] += float(src[i]) for i < count, or dst[i] = float(src[i]) where `assign`; each bf16
/// widened exactly, so the sums are those of a cast to float32 and an add. On the OpenMP threads.
void add_bf16_to_float(const c10::BFloat16* src, float* dst, int64_t count, bool assign);

}  // namespace bigbatch::nn::kernels
