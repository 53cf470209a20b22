// GCC 12 reports the _mm512_undefined_* values inside its own intrinsics as uninitialized once
// they are inlined (as in bf16_attention.cpp); the pragmas must come before the headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "bigbatch/nn/gelu_kernels.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstring>
#include <vector>

#include "bigbatch/nn/avx512bw_kernels.h"
#include "bigbatch/nn/row_parts_omp.h"
#include "bigbatch/nn/row_shape.h"

namespace bigbatch::nn::kernels {
namespace {

using Bits = uint16_t;

/// Every bf16 bit pattern's GELU (bf16 bits) and GELU' (float32), indexed by the pattern.
struct GeluTables {
  /// 65,536 values and one more, so that a 32-bit gather at the last index stays inside.
  std::vector<Bits> values;
  std::vector<float> slopes;  // 65,536
};

constexpr int64_t kPatterns = int64_t(1) << 16;

/// Made on first use, by LibTorch's own GELU: at::gelu of every bf16 value in bf16, and
/// at::gelu_backward of a gradient of ones in float32 (the precision its bf16 kernel computes in).
const GeluTables& tables() {
  static const GeluTables made = [] {
    const c10::AutoGradMode no_grad(false);
    const c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::DispatchKey::AutocastCPU};
    const at::Tensor patterns =  // every bf16 bit pattern, (65536)
        at::arange(kPatterns, at::kInt).to(at::kShort).view(at::kBFloat16);
    const at::Tensor values = at::gelu(patterns).contiguous();  // (65536) bf16
    const at::Tensor slopes =                                   // (65536) float32
        at::gelu_backward(at::ones({kPatterns}, at::kFloat), patterns.to(at::kFloat)).contiguous();
    GeluTables t;
    t.values.assign(size_t(kPatterns) + 1, 0);
    t.slopes.resize(size_t(kPatterns));
    std::memcpy(t.values.data(), values.data_ptr(), size_t(kPatterns) * sizeof(Bits));
    std::memcpy(t.slopes.data(), slopes.data_ptr<float>(), size_t(kPatterns) * sizeof(float));
    return t;
  }();
  return made;
}

/// Values per OpenMP task.
constexpr int64_t kGrain = int64_t(1) << 15;

void gelu_values(const GeluTables& t, const Bits* x, Bits* y, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    y[i] = t.values[x[i]];
}

void gelu_backward_values(const GeluTables& t, const Bits* dy, const Bits* x, c10::BFloat16* dx,
                          int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    store(dx + i, widen(c10::BFloat16(dy[i], c10::BFloat16::from_bits())) * t.slopes[x[i]]);
}

/// add_row_to_sums, built for each ISA: a row's part of bf16_column_sums, in its order.
BB_VECTOR_CLONES
void add_row(const c10::BFloat16* row, float* sums, int64_t channels) {
  add_row_to_sums(row, sums, channels);
}

#if BB_AVX512BW_KERNELS
constexpr int64_t kLanes = 16;

BB_AVX512_TARGET void gelu_vectors(const GeluTables& t, const Bits* x, Bits* y, int64_t begin,
                                   int64_t end) {
  // 32-bit gathers at 2-byte steps: the low half of each is the value (hence the table's extra).
  const void* values = t.values.data();
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    const __m512i found = _mm512_i32gather_epi32(load_bf16_patterns(x + i), values, 2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(found));
  }
  gelu_values(t, x, y, i, end);
}

BB_AVX512_TARGET void gelu_backward_vectors(const GeluTables& t, const Bits* dy, const Bits* x,
                                            c10::BFloat16* dx, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    const __m512 slope = _mm512_i32gather_ps(load_bf16_patterns(x + i), t.slopes.data(), 4);
    store_as_bf16(reinterpret_cast<Bits*>(dx + i),
                  _mm512_mul_ps(load_bf16_as_float(dy + i), slope));
  }
  gelu_backward_values(t, dy, x, dx, i, end);
}

#endif

/// dx[i] for i in [begin, end): in AVX-512 vectors where the CPU has them.
void gelu_backward_range(const GeluTables& t, const Bits* dy, const Bits* x, c10::BFloat16* dx,
                         int64_t begin, int64_t end) {
#if BB_AVX512BW_KERNELS
  if (has_avx512bw()) {
    gelu_backward_vectors(t, dy, x, dx, begin, end);
    return;
  }
#endif
  gelu_backward_values(t, dy, x, dx, begin, end);
}

}  // namespace

void bf16_gelu(const c10::BFloat16* x, c10::BFloat16* y, int64_t count) {
  const GeluTables& t = tables();
  const Bits* in = reinterpret_cast<const Bits*>(x);
  Bits* out = reinterpret_cast<Bits*>(y);
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
#if BB_AVX512BW_KERNELS
    if (has_avx512bw()) {
      gelu_vectors(t, in, out, begin, end);
      return;
    }
#endif
    gelu_values(t, in, out, begin, end);
  });
}

void bf16_gelu_backward(const c10::BFloat16* dy, const c10::BFloat16* x, c10::BFloat16* dx,
                        int64_t count) {
  const GeluTables& t = tables();
  const Bits* grad = reinterpret_cast<const Bits*>(dy);
  const Bits* in = reinterpret_cast<const Bits*>(x);
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    gelu_backward_range(t, grad, in, dx, begin, end);
  });
}

void bf16_gelu_backward_with_column_sums(const c10::BFloat16* dy, const c10::BFloat16* x,
                                         c10::BFloat16* dx, RowShape shape, float* sums) {
  const GeluTables& t = tables();
  const Bits* grad = reinterpret_cast<const Bits*>(dy);
  const Bits* in = reinterpret_cast<const Bits*>(x);
  const int64_t channels = shape.channels;
  // Row by row, each row added to its chunk's sums right after it is written, while it is in L1:
  // the order in which bf16_column_sums adds the rows.
  on_row_parts_with_column_sums(shape, sums, [&](int64_t begin, int64_t end, float* chunk_sums) {
    for (int64_t first = begin; first < end; first += kChunkRows) {
      float* row_sums = zeroed_chunk_sums(chunk_sums, first, channels);
      for (int64_t r = first; r < std::min(end, first + kChunkRows); ++r) {
        const int64_t at = r * channels;
        gelu_backward_range(t, grad + at, in + at, dx + at, 0, channels);
        add_row(dx + at, row_sums, channels);
      }
    }
  });
}

}  // namespace bigbatch::nn::kernels
