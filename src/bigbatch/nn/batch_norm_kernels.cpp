#include "bigbatch/nn/batch_norm_kernels.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "bigbatch/nn/row_parts_omp.h"

// Calls function<C>(args...) with the channel count as a constant for the widths a ResNet has (the
// accumulators then stay in registers and the loops unroll), function<0>(args...) otherwise.
#define BB_WITH_CHANNELS(channels, function, ...) \
  switch (channels) {                             \
    case 16:                                      \
      function<16>(__VA_ARGS__);                  \
      break;                                      \
    case 32:                                      \
      function<32>(__VA_ARGS__);                  \
      break;                                      \
    case 64:                                      \
      function<64>(__VA_ARGS__);                  \
      break;                                      \
    default:                                      \
      function<0>(__VA_ARGS__);                   \
  }

namespace bigbatch::nn::kernels {
namespace {

/// The count, mean and M2 of part of the rows, per channel, in double.
struct PartMoments {
  int64_t count = 0;
  std::vector<double> mean, m2;    // (C) each
  std::vector<float> chunk;        // (3C) a chunk's mean, deviations and squared deviations
  std::vector<double> chunk_wide;  // (2C) the same in double, for the merge

  explicit PartMoments(int64_t channels)
      : mean(channels), m2(channels), chunk(3 * channels), chunk_wide(2 * channels) {}
};

/// Merges (count_b, mean_b, m2_b) of n_b values into `into` (Chan, Golub and LeVeque).
inline void merge_moments(int64_t count_a, double* mean_a, double* m2_a, int64_t count_b,
                          const double* mean_b, const double* m2_b, int64_t channels) {
  if (count_b == 0)
    return;
  const double total = double(count_a + count_b);
  const double weight_b = double(count_b) / total;
  const double cross = double(count_a) * double(count_b) / total;
  for (int64_t c = 0; c < channels; ++c) {
    const double delta = mean_b[c] - mean_a[c];
    mean_a[c] += delta * weight_b;
    m2_a[c] += m2_b[c] + delta * delta * cross;
  }
}

/// moments_of_rows with kChannels channels (0: `runtime_channels`).
template <int64_t kChannels, typename T>
BB_INLINE void moments_of_rows_fixed(const T* x, int64_t begin, int64_t end,
                                     int64_t runtime_channels, PartMoments& part) {
  const int64_t channels = kChannels > 0 ? kChannels : runtime_channels;
  alignas(64) float fixed[3 * (kChannels > 0 ? kChannels : 1)];
  float* __restrict sum = kChannels > 0 ? fixed : part.chunk.data();
  float* __restrict residual = sum + channels;
  float* __restrict m2 = sum + 2 * channels;
  double* chunk_mean = part.chunk_wide.data();
  double* chunk_m2 = part.chunk_wide.data() + channels;
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t last = std::min(end, first + kChunkRows);
    const int64_t n = last - first;
    for (int64_t c = 0; c < 3 * channels; ++c)
      sum[c] = 0.0f;
    for (int64_t r = first; r < last; ++r) {
      const T* __restrict row = x + r * channels;
      for (int64_t c = 0; c < channels; ++c)
        sum[c] += widen(row[c]);
    }
    const float inverse_n = 1.0f / float(n);
    for (int64_t c = 0; c < channels; ++c)
      sum[c] *= inverse_n;  // now the chunk's mean, as rounded
    // The corrected two-pass algorithm: the deviations' own sum repairs the mean's rounding.
    for (int64_t r = first; r < last; ++r) {
      const T* __restrict row = x + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float deviation = widen(row[c]) - sum[c];
        residual[c] += deviation;
        m2[c] += deviation * deviation;
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      const double shift = double(residual[c]) / double(n);
      chunk_mean[c] = double(sum[c]) + shift;
      chunk_m2[c] = double(m2[c]) - double(residual[c]) * shift;
    }
    merge_moments(part.count, part.mean.data(), part.m2.data(), n, chunk_mean, chunk_m2, channels);
    part.count += n;
  }
}

BB_VECTOR_CLONES
void moments_of_rows(const float* x, int64_t begin, int64_t end, int64_t channels,
                     PartMoments& part) {
  BB_WITH_CHANNELS(channels, moments_of_rows_fixed, x, begin, end, channels, part);
}

BB_VECTOR_CLONES
void moments_of_rows(const c10::BFloat16* x, int64_t begin, int64_t end, int64_t channels,
                     PartMoments& part) {
  BB_WITH_CHANNELS(channels, moments_of_rows_fixed, x, begin, end, channels, part);
}

template <int64_t kChannels, typename T>
BB_INLINE void normalize_rows_fixed(const NormalizeRows<T>& a, int64_t begin, int64_t end) {
  const int64_t channels = kChannels > 0 ? kChannels : a.shape.channels;
  const float* __restrict scale = a.scale;
  const float* __restrict shift = a.shift;
  // The ReLU as max(y, floor): -inf passes every value through.
  const float floor = a.relu ? 0.0f : -std::numeric_limits<float>::infinity();
  for (int64_t r = begin; r < end; ++r) {
    const T* __restrict x = a.input + r * channels;
    T* __restrict y = a.output + r * channels;
    if (a.residual != nullptr) {
      const T* __restrict s = a.residual + r * channels;
      for (int64_t c = 0; c < channels; ++c)
        store(y + c, std::max(widen(x[c]) * scale[c] + shift[c] + widen(s[c]), floor));
    } else {
      for (int64_t c = 0; c < channels; ++c)
        store(y + c, std::max(widen(x[c]) * scale[c] + shift[c], floor));
    }
  }
}

BB_VECTOR_CLONES
void normalize_rows_range(const NormalizeRows<float>& a, int64_t begin, int64_t end) {
  BB_WITH_CHANNELS(a.shape.channels, normalize_rows_fixed, a, begin, end);
}

BB_VECTOR_CLONES
void normalize_rows_range(const NormalizeRows<c10::BFloat16>& a, int64_t begin, int64_t end) {
  BB_WITH_CHANNELS(a.shape.channels, normalize_rows_fixed, a, begin, end);
}

/// Per-channel sums of g and g * (x - mean) over part of the rows, in double.
struct PartSums {
  std::vector<double> g, gx;  // (C) each
  std::vector<float> chunk;   // (2C) a chunk's two sums

  explicit PartSums(int64_t channels) : g(channels), gx(channels), chunk(2 * channels) {}
};

template <int64_t kChannels, typename T>
BB_INLINE void backward_sums_fixed(const BackwardRows<T>& a, int64_t begin, int64_t end, T* g_out,
                                   PartSums& part) {
  const int64_t channels = kChannels > 0 ? kChannels : a.shape.channels;
  alignas(64) float fixed[2 * (kChannels > 0 ? kChannels : 1)];
  float* __restrict sum_g = kChannels > 0 ? fixed : part.chunk.data();
  float* __restrict sum_gx = sum_g + channels;
  const float* __restrict mean = a.mean;
  const bool relu = a.output != nullptr;
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t last = std::min(end, first + kChunkRows);
    for (int64_t c = 0; c < 2 * channels; ++c)
      sum_g[c] = 0.0f;
    for (int64_t r = first; r < last; ++r) {
      const T* __restrict dy = a.grad_output + r * channels;
      const T* __restrict x = a.input + r * channels;
      const T* __restrict y = relu ? a.output + r * channels : dy;
      T* __restrict g_row = g_out != nullptr ? g_out + r * channels : nullptr;
      for (int64_t c = 0; c < channels; ++c) {
        const float g = !relu || widen(y[c]) > 0.0f ? widen(dy[c]) : 0.0f;
        if (g_row != nullptr)
          store(g_row + c, g);
        sum_g[c] += g;
        sum_gx[c] += g * (widen(x[c]) - mean[c]);
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      part.g[c] += sum_g[c];
      part.gx[c] += sum_gx[c];
    }
  }
}

BB_VECTOR_CLONES
void backward_sums_of_rows(const BackwardRows<float>& a, int64_t begin, int64_t end, float* g_out,
                           PartSums& part) {
  BB_WITH_CHANNELS(a.shape.channels, backward_sums_fixed, a, begin, end, g_out, part);
}

BB_VECTOR_CLONES
void backward_sums_of_rows(const BackwardRows<c10::BFloat16>& a, int64_t begin, int64_t end,
                           c10::BFloat16* g_out, PartSums& part) {
  BB_WITH_CHANNELS(a.shape.channels, backward_sums_fixed, a, begin, end, g_out, part);
}

template <int64_t kChannels, typename T>
BB_INLINE void input_gradient_fixed(const BackwardRows<T>& a, const InputGradient<T>& d,
                                    int64_t begin, int64_t end) {
  const int64_t channels = kChannels > 0 ? kChannels : a.shape.channels;
  const float* __restrict p = d.p;
  const float* __restrict q = d.q;
  const float* __restrict shift = d.r;
  for (int64_t r = begin; r < end; ++r) {
    const T* __restrict x = a.input + r * channels;
    T* __restrict dx = d.grad_input + r * channels;
    if (d.g != nullptr) {
      const T* __restrict g = d.g + r * channels;
      for (int64_t c = 0; c < channels; ++c)
        store(dx + c, p[c] * widen(g[c]) - q[c] * widen(x[c]) + shift[c]);
    } else if (a.output != nullptr) {
      const T* __restrict dy = a.grad_output + r * channels;
      const T* __restrict y = a.output + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float g = widen(y[c]) > 0.0f ? widen(dy[c]) : 0.0f;
        store(dx + c, p[c] * g - q[c] * widen(x[c]) + shift[c]);
      }
    } else {
      const T* __restrict dy = a.grad_output + r * channels;
      for (int64_t c = 0; c < channels; ++c)
        store(dx + c, p[c] * widen(dy[c]) - q[c] * widen(x[c]) + shift[c]);
    }
  }
}

BB_VECTOR_CLONES
void input_gradient_range(const BackwardRows<float>& a, const InputGradient<float>& d,
                          int64_t begin, int64_t end) {
  BB_WITH_CHANNELS(a.shape.channels, input_gradient_fixed, a, d, begin, end);
}

BB_VECTOR_CLONES
void input_gradient_range(const BackwardRows<c10::BFloat16>& a,
                          const InputGradient<c10::BFloat16>& d, int64_t begin, int64_t end) {
  BB_WITH_CHANNELS(a.shape.channels, input_gradient_fixed, a, d, begin, end);
}

}  // namespace

template <typename T>
void channel_moments(const T* x, RowShape shape, double* mean, double* m2) {
  const int64_t channels = shape.channels;
  std::vector<PartMoments> parts(size_t(std::max(1, at::get_num_threads())), PartMoments(channels));
  const int64_t used = on_row_parts(shape, [&](int64_t part, int64_t begin, int64_t end) {
    moments_of_rows(x, begin, end, channels, parts[size_t(part)]);
  });
  std::fill(mean, mean + channels, 0.0);
  std::fill(m2, m2 + channels, 0.0);
  int64_t count = 0;
  for (int64_t part = 0; part < used; ++part) {
    merge_moments(count, mean, m2, parts[part].count, parts[part].mean.data(),
                  parts[part].m2.data(), channels);
    count += parts[part].count;
  }
}

template <typename T>
void normalize_rows(const NormalizeRows<T>& args) {
  on_row_parts(args.shape, [&](int64_t, int64_t begin, int64_t end) {
    normalize_rows_range(args, begin, end);
  });
}

template <typename T>
void backward_sums(const BackwardRows<T>& args, double* sum_g, double* sum_gx, T* g_out) {
  const int64_t channels = args.shape.channels;
  std::vector<PartSums> parts(size_t(std::max(1, at::get_num_threads())), PartSums(channels));
  const int64_t used = on_row_parts(args.shape, [&](int64_t part, int64_t begin, int64_t end) {
    backward_sums_of_rows(args, begin, end, g_out, parts[size_t(part)]);
  });
  std::fill(sum_g, sum_g + channels, 0.0);
  std::fill(sum_gx, sum_gx + channels, 0.0);
  for (int64_t part = 0; part < used; ++part) {
    for (int64_t c = 0; c < channels; ++c) {
      sum_g[c] += parts[part].g[c];
      sum_gx[c] += parts[part].gx[c];
    }
  }
}

template <typename T>
void input_gradient(const BackwardRows<T>& args, const InputGradient<T>& gradient) {
  on_row_parts(args.shape, [&](int64_t, int64_t begin, int64_t end) {
    input_gradient_range(args, gradient, begin, end);
  });
}

#define BB_BATCH_NORM_KERNELS(T)                                                \
  template void channel_moments<T>(const T*, RowShape, double*, double*);       \
  template void normalize_rows<T>(const NormalizeRows<T>&);                     \
  template void backward_sums<T>(const BackwardRows<T>&, double*, double*, T*); \
  template void input_gradient<T>(const BackwardRows<T>&, const InputGradient<T>&);
BB_BATCH_NORM_KERNELS(float)
BB_BATCH_NORM_KERNELS(c10::BFloat16)
#undef BB_BATCH_NORM_KERNELS

}  // namespace bigbatch::nn::kernels
