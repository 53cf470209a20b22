// GCC 12 reports the _mm512_undefined_* values inside its own intrinsics as uninitialized once
// they are inlined (as in gelu_kernels.cpp); the pragmas must come before the headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "bigbatch/nn/llama_kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "bigbatch/nn/avx512bw_kernels.h"
#include "bigbatch/nn/row_parts_omp.h"

namespace bigbatch::nn::kernels {
namespace {

/// Values per row when a flat element-wise pass is split over the threads as rows.
constexpr int64_t kFlatRow = 1024;

/// exp(x) for float32 x as a polynomial that the compiler vectorises (Cephes' expf: a
/// degree-6 polynomial on [-ln2/2, ln2/2] times 2^n, within 0.99 ulp), so the loops around it need
/// no call into libm. NaN stays NaN; arguments are clamped to [-87, 88], where 2^n is a normal
/// float (exp(-87) = 1.6e-38 instead of a subnormal or 0, exp(88) = 1.7e38 instead of inf).
BB_INLINE float exp_polynomial(float x) {
  const bool number = x == x;
  const float clamped = std::min(std::max(number ? x : 0.0f, -87.0f), 88.0f);
  // Rounded to the nearest integer by adding and taking away 1.5 * 2^23: with std::floor
  // instead, GCC 12 left the SwiGLU loops scalar in every clone.
  const float shifter = 12582912.0f;
  const float n = (clamped * 1.44269504088896341f + shifter) - shifter;
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return number ? y * scale : x;
}

BB_VECTOR_CLONES
void rms_norm_range(const RmsNormRows& a, int64_t begin, int64_t end) {
  const int64_t channels = a.shape.channels;
  const float* __restrict weight = a.weight;
  const float inverse_channels = 1.0f / float(channels);
  for (int64_t r = begin; r < end; ++r) {
    const float* __restrict x = a.input + r * channels;
    float* __restrict y = a.output + r * channels;
    float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
    for (int64_t c = 0; c < channels; ++c)
      squares += x[c] * x[c];
    // mean(x^2) rounded, then rsqrt of it plus eps, as torch.rsqrt(x.pow(2).mean(-1) + eps).
    const float rstd = 1.0f / std::sqrt(squares * inverse_channels + a.eps);
    a.rstd[r] = rstd;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c)
      y[c] = weight[c] * (x[c] * rstd);
  }
}

/// RMSNorm's backward over rows [begin, end), which start on a chunk boundary; writes each
/// chunk's float sums of dy * n to `chunk_sums` (chunks, C) unless it is nullptr.
BB_VECTOR_CLONES
void rms_norm_backward_range(const RmsNormBackwardRows& a, int64_t begin, int64_t end,
                             float* chunk_sums) {
  const int64_t channels = a.shape.channels;
  const float* __restrict weight = a.weight;
  const float inverse_channels = 1.0f / float(channels);
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t last = std::min(end, first + kChunkRows);
    float* __restrict sums = zeroed_chunk_sums(chunk_sums, first, channels);
    for (int64_t r = first; r < last; ++r) {
      const float* __restrict dy = a.grad_output + r * channels;
      const float* __restrict x = a.input + r * channels;
      const float rstd = a.rstd[r];
      if (a.grad_input != nullptr) {
        float dot = 0.0f;  // sum of dy * weight * x
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < channels; ++c)
          dot += dy[c] * weight[c] * x[c];
        // dx = rstd * dn - x * rstd^3 * mean(dn * x), dn = dy * weight.
        const float coefficient = rstd * rstd * rstd * dot * inverse_channels;
        float* __restrict dx = a.grad_input + r * channels;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c)
          dx[c] = rstd * (dy[c] * weight[c]) - x[c] * coefficient;
      }
      if (sums != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c)
          sums[c] += dy[c] * (x[c] * rstd);
      }
    }
  }
}

/// The rotary map over the token rows [begin, end): forward from (B, T, H, D) to (B, H, T, D),
/// backward (its transpose: the rotation by minus the angle) from (B, H, T, D) to (B, T, H, D).
template <bool kBackward, typename In, typename Out>
BB_INLINE void rotary_rows(const RotaryMap<In, Out>& a, int64_t begin, int64_t end) {
  const int64_t heads = a.heads, dim = a.head_dim, time = a.time, half = dim / 2;
  for (int64_t n = begin; n < end; ++n) {
    const int64_t b = n / time, t = n % time;
    const float* __restrict cos = a.cos + t * dim;
    const float* __restrict sin = a.sin + t * dim;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t token_major = (n * heads + h) * dim;              // in (B, T, H, D)
      const int64_t head_major = ((b * heads + h) * time + t) * dim;  // in (B, H, T, D)
      const In* __restrict x = a.input + (kBackward ? head_major : token_major);
      Out* __restrict y = a.output + (kBackward ? token_major : head_major);
      if constexpr (!kBackward) {
#pragma omp simd
        for (int64_t i = 0; i < half; ++i)
          store(y + i, widen(x[i]) * cos[i] - widen(x[i + half]) * sin[i]);
#pragma omp simd
        for (int64_t i = half; i < dim; ++i)
          store(y + i, widen(x[i]) * cos[i] + widen(x[i - half]) * sin[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < half; ++i)
          store(y + i, widen(x[i]) * cos[i] + widen(x[i + half]) * sin[i + half]);
#pragma omp simd
        for (int64_t i = half; i < dim; ++i)
          store(y + i, widen(x[i]) * cos[i] - widen(x[i - half]) * sin[i - half]);
      }
    }
  }
}

BB_VECTOR_CLONES
void rotary_forward_range(const RotaryRows& a, int64_t begin, int64_t end) {
  rotary_rows<false>(a, begin, end);
}

BB_VECTOR_CLONES
void rotary_backward_range(const RotaryRows& a, int64_t begin, int64_t end) {
  rotary_rows<true>(a, begin, end);
}

BB_VECTOR_CLONES
void rotary_forward_bf16_range(const RotaryMap<c10::BFloat16, float>& a, int64_t begin,
                               int64_t end) {
  rotary_rows<false>(a, begin, end);
}

BB_VECTOR_CLONES
void rotary_backward_bf16_range(const RotaryMap<float, c10::BFloat16>& a, int64_t begin,
                                int64_t end) {
  rotary_rows<true>(a, begin, end);
}

BB_VECTOR_CLONES
void rotary_forward_bf16_rounded_range(const RotaryMap<c10::BFloat16, c10::BFloat16>& a,
                                       int64_t begin, int64_t end) {
  rotary_rows<false>(a, begin, end);
}

BB_VECTOR_CLONES
void rotary_backward_bf16_rounded_range(const RotaryMap<c10::BFloat16, c10::BFloat16>& a,
                                        int64_t begin, int64_t end) {
  rotary_rows<true>(a, begin, end);
}

/// silu(gate) * up over [begin, end), in float32.
template <typename T>
BB_INLINE void swiglu_forward_values(const T* __restrict gate, const T* __restrict up,
                                     T* __restrict output, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = widen(gate[i]);
    const float silu = g / (1.0f + exp_polynomial(-g));  // as ATen's silu: x / (1 + exp(-x))
    store(output + i, silu * widen(up[i]));
  }
}

/// SwiGLU's gradients over [begin, end), in float32.
template <typename T>
BB_INLINE void swiglu_backward_values(const T* __restrict grad_output, const T* __restrict gate,
                                      const T* __restrict up, T* __restrict grad_gate,
                                      T* __restrict grad_up, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = widen(gate[i]);
    const float denominator = 1.0f + exp_polynomial(-g);
    const float sigmoid = 1.0f / denominator;
    const float dy = widen(grad_output[i]);
    store(grad_up + i, dy * (g / denominator));
    store(grad_gate + i, (dy * widen(up[i])) * (sigmoid * (1.0f + g * (1.0f - sigmoid))));
  }
}

BB_VECTOR_CLONES
void swiglu_forward_range(const float* gate, const float* up, float* output, int64_t begin,
                          int64_t end) {
  swiglu_forward_values(gate, up, output, begin, end);
}

/// SiLU and its derivative for every bf16 gate value, indexed by its bit pattern: in bf16 the
/// gate has only 65,536 values, so a lookup replaces the exponential and the two divisions per
/// value (bitwise the same results: the tables hold what swiglu_*_values compute).
struct SwigluTables {
  std::vector<float> silu;   ///< g / (1 + exp(-g)), 65,536
  std::vector<float> slope;  ///< sigmoid(g) (1 + g (1 - sigmoid(g))), 65,536
};

BB_VECTOR_CLONES
void swiglu_forward_bf16_values(const c10::BFloat16* __restrict gate,
                                const c10::BFloat16* __restrict up,
                                c10::BFloat16* __restrict output, const float* __restrict silu,
                                int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i)
    store(output + i, silu[gate[i].x] * widen(up[i]));
}

#if BB_AVX512BW_KERNELS
constexpr int64_t kLanes = 16;

/// swiglu_forward_bf16_values with AVX-512 gathers (GCC emulates them with scalar loads).
BB_AVX512_TARGET void swiglu_forward_bf16_vectors(const uint16_t* gate, const uint16_t* up,
                                                  uint16_t* output, const float* silu,
                                                  int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    const __m512 value = _mm512_i32gather_ps(load_bf16_patterns(gate + i), silu, 4);
    store_as_bf16(output + i, _mm512_mul_ps(value, load_bf16_as_float(up + i)));
  }
  swiglu_forward_bf16_values(reinterpret_cast<const c10::BFloat16*>(gate),
                             reinterpret_cast<const c10::BFloat16*>(up),
                             reinterpret_cast<c10::BFloat16*>(output), silu, i, end);
}
#endif

void swiglu_forward_bf16_range(const c10::BFloat16* gate, const c10::BFloat16* up,
                               c10::BFloat16* output, const float* silu, int64_t begin,
                               int64_t end) {
#if BB_AVX512BW_KERNELS
  if (has_avx512bw()) {
    swiglu_forward_bf16_vectors(reinterpret_cast<const uint16_t*>(gate),
                                reinterpret_cast<const uint16_t*>(up),
                                reinterpret_cast<uint16_t*>(output), silu, begin, end);
    return;
  }
#endif
  swiglu_forward_bf16_values(gate, up, output, silu, begin, end);
}

BB_VECTOR_CLONES
void swiglu_backward_range(const float* grad_output, const float* gate, const float* up,
                           float* grad_gate, float* grad_up, int64_t begin, int64_t end) {
  swiglu_backward_values(grad_output, gate, up, grad_gate, grad_up, begin, end);
}

/// Made on first use by the float32 backward kernel itself at every bf16 gate value with unit
/// gradients and up: its grad_up is then silu(g) and its grad_gate the slope (both times 1,
/// exact), so the tables hold what the float32 kernels compute.
const SwigluTables& swiglu_tables() {
  static const SwigluTables made = [] {
    constexpr int64_t kPatterns = int64_t(1) << 16;
    std::vector<float> gate(static_cast<size_t>(kPatterns));
    for (int64_t i = 0; i < kPatterns; ++i)
      gate[size_t(i)] = widen(c10::BFloat16(uint16_t(i), c10::BFloat16::from_bits()));
    const std::vector<float> ones(size_t(kPatterns), 1.0f);
    SwigluTables t;
    t.silu.resize(size_t(kPatterns));
    t.slope.resize(size_t(kPatterns));
    swiglu_backward_range(ones.data(), gate.data(), ones.data(), t.slope.data(), t.silu.data(), 0,
                          kPatterns);
    return t;
  }();
  return made;
}

BB_VECTOR_CLONES
void swiglu_backward_bf16_values(const c10::BFloat16* __restrict grad_output,
                                 const c10::BFloat16* __restrict gate,
                                 const c10::BFloat16* __restrict up,
                                 c10::BFloat16* __restrict grad_gate,
                                 c10::BFloat16* __restrict grad_up, const float* __restrict silu,
                                 const float* __restrict slope, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const uint16_t g = gate[i].x;
    const float dy = widen(grad_output[i]);
    store(grad_up + i, dy * silu[g]);
    store(grad_gate + i, (dy * widen(up[i])) * slope[g]);
  }
}

#if BB_AVX512BW_KERNELS
/// swiglu_backward_bf16_values with AVX-512 gathers.
BB_AVX512_TARGET void swiglu_backward_bf16_vectors(const uint16_t* grad_output,
                                                   const uint16_t* gate, const uint16_t* up,
                                                   uint16_t* grad_gate, uint16_t* grad_up,
                                                   const float* silu, const float* slope,
                                                   int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    const __m512i g = load_bf16_patterns(gate + i);
    const __m512 dy = load_bf16_as_float(grad_output + i);
    store_as_bf16(grad_up + i, _mm512_mul_ps(dy, _mm512_i32gather_ps(g, silu, 4)));
    store_as_bf16(grad_gate + i, _mm512_mul_ps(_mm512_mul_ps(dy, load_bf16_as_float(up + i)),
                                               _mm512_i32gather_ps(g, slope, 4)));
  }
  swiglu_backward_bf16_values(reinterpret_cast<const c10::BFloat16*>(grad_output),
                              reinterpret_cast<const c10::BFloat16*>(gate),
                              reinterpret_cast<const c10::BFloat16*>(up),
                              reinterpret_cast<c10::BFloat16*>(grad_gate),
                              reinterpret_cast<c10::BFloat16*>(grad_up), silu, slope, i, end);
}
#endif

void swiglu_backward_bf16_range(const c10::BFloat16* grad_output, const c10::BFloat16* gate,
                                const c10::BFloat16* up, c10::BFloat16* grad_gate,
                                c10::BFloat16* grad_up, const SwigluTables& tables, int64_t begin,
                                int64_t end) {
#if BB_AVX512BW_KERNELS
  if (has_avx512bw()) {
    swiglu_backward_bf16_vectors(
        reinterpret_cast<const uint16_t*>(grad_output), reinterpret_cast<const uint16_t*>(gate),
        reinterpret_cast<const uint16_t*>(up), reinterpret_cast<uint16_t*>(grad_gate),
        reinterpret_cast<uint16_t*>(grad_up), tables.silu.data(), tables.slope.data(), begin, end);
    return;
  }
#endif
  swiglu_backward_bf16_values(grad_output, gate, up, grad_gate, grad_up, tables.silu.data(),
                              tables.slope.data(), begin, end);
}

/// Runs `work(begin, end)` over [0, count) in rows of kFlatRow values on the OpenMP threads.
template <typename Work>
void on_flat_parts(int64_t count, const Work& work) {
  const RowShape shape{(count + kFlatRow - 1) / kFlatRow, kFlatRow};
  on_row_parts(shape, [&](int64_t, int64_t begin, int64_t end) {
    work(begin * kFlatRow, std::min(count, end * kFlatRow));
  });
}

/// Runs `range(args, begin, end)` over the token rows [0, B*T) of the rotary map `args` on the
/// OpenMP threads.
template <typename In, typename Out>
void on_token_rows(const RotaryMap<In, Out>& args,
                   void (*range)(const RotaryMap<In, Out>&, int64_t, int64_t)) {
  on_row_parts({args.batch * args.time, args.heads * args.head_dim},
               [&](int64_t, int64_t begin, int64_t end) { range(args, begin, end); });
}

}  // namespace

void rms_norm_rows(const RmsNormRows& args) {
  on_row_parts(args.shape,
               [&](int64_t, int64_t begin, int64_t end) { rms_norm_range(args, begin, end); });
}

void rms_norm_backward_rows(const RmsNormBackwardRows& args) {
  on_row_parts_with_column_sums(args.shape, args.grad_weight,
                                [&](int64_t begin, int64_t end, float* chunk_sums) {
                                  rms_norm_backward_range(args, begin, end, chunk_sums);
                                });
}

void rotary_forward(const RotaryRows& args) {
  on_token_rows(args, rotary_forward_range);
}

void rotary_backward(const RotaryRows& args) {
  on_token_rows(args, rotary_backward_range);
}

void rotary_forward(const RotaryMap<c10::BFloat16, float>& args) {
  on_token_rows(args, rotary_forward_bf16_range);
}

void rotary_backward(const RotaryMap<float, c10::BFloat16>& args) {
  on_token_rows(args, rotary_backward_bf16_range);
}

void rotary_forward(const RotaryMap<c10::BFloat16, c10::BFloat16>& args) {
  on_token_rows(args, rotary_forward_bf16_rounded_range);
}

void rotary_backward(const RotaryMap<c10::BFloat16, c10::BFloat16>& args) {
  on_token_rows(args, rotary_backward_bf16_rounded_range);
}

void swiglu_forward(const float* gate, const float* up, float* output, int64_t count) {
  on_flat_parts(count, [&](int64_t begin, int64_t end) {
    swiglu_forward_range(gate, up, output, begin, end);
  });
}

void swiglu_forward(const c10::BFloat16* gate, const c10::BFloat16* up, c10::BFloat16* output,
                    int64_t count) {
  const float* silu = swiglu_tables().silu.data();
  on_flat_parts(count, [&](int64_t begin, int64_t end) {
    swiglu_forward_bf16_range(gate, up, output, silu, begin, end);
  });
}

void swiglu_backward(const float* grad_output, const float* gate, const float* up, float* grad_gate,
                     float* grad_up, int64_t count) {
  on_flat_parts(count, [&](int64_t begin, int64_t end) {
    swiglu_backward_range(grad_output, gate, up, grad_gate, grad_up, begin, end);
  });
}

void swiglu_backward(const c10::BFloat16* grad_output, const c10::BFloat16* gate,
                     const c10::BFloat16* up, c10::BFloat16* grad_gate, c10::BFloat16* grad_up,
                     int64_t count) {
  const SwigluTables& tables = swiglu_tables();
  on_flat_parts(count, [&](int64_t begin, int64_t end) {
    swiglu_backward_bf16_range(grad_output, gate, up, grad_gate, grad_up, tables, begin, end);
  });
}

}  // namespace bigbatch::nn::kernels
