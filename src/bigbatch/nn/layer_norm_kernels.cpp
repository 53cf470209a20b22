#include "bigbatch/nn/layer_norm_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "bigbatch/nn/row_parts_omp.h"
#include "bigbatch/nn/transpose_kernels.h"

namespace bigbatch::nn::kernels {
namespace {

BB_VECTOR_CLONES
void layer_norm_range(const LayerNormToBf16Rows& a, int64_t begin, int64_t end) {
  const int64_t channels = a.shape.channels;
  const float* __restrict weight = a.weight;
  const float* __restrict bias = a.bias;
  const float inverse_channels = 1.0f / float(channels);
  for (int64_t r = begin; r < end; ++r) {
    const float* __restrict x = a.input + r * channels;
    c10::BFloat16* __restrict y = a.output + r * channels;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < channels; ++c)
      sum += x[c];
    const float mean = sum * inverse_channels;
    float squares = 0.0f;  // of the deviations: no cancellation for rows far from zero
#pragma omp simd reduction(+ : squares)
    for (int64_t c = 0; c < channels; ++c)
      squares += (x[c] - mean) * (x[c] - mean);
    const float rstd = 1.0f / std::sqrt(squares * inverse_channels + a.eps);
    const float shift = -rstd * mean;
    a.mean[r] = mean;
    a.rstd[r] = rstd;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c)
      store(y + c, (x[c] * rstd + shift) * weight[c] + bias[c]);
  }
}

/// LayerNorm's backward over rows [begin, end), which start on a chunk boundary; writes each
/// chunk's float sums of dy * (x - mean) * rstd and of dy to `weight_sums` and `bias_sums`
/// (chunks, C) unless they are nullptr.
BB_VECTOR_CLONES
void layer_norm_backward_range(const LayerNormBackwardFromBf16Rows& a, int64_t begin, int64_t end,
                               float* weight_sums, float* bias_sums) {
  const int64_t channels = a.shape.channels;
  const float* __restrict weight = a.weight;
  const float inverse_channels = 1.0f / float(channels);
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t last = std::min(end, first + kChunkRows);
    float* __restrict w_sums = zeroed_chunk_sums(weight_sums, first, channels);
    float* __restrict b_sums = zeroed_chunk_sums(bias_sums, first, channels);
    for (int64_t r = first; r < last; ++r) {
      const c10::BFloat16* __restrict dy = a.grad_output + r * channels;
      const float* __restrict x = a.input + r * channels;
      const float mean = a.mean[r], rstd = a.rstd[r];
      if (a.grad_input != nullptr) {
        float ds = 0.0f, db = 0.0f;
#pragma omp simd reduction(+ : ds, db)
        for (int64_t c = 0; c < channels; ++c) {
          const float dn = widen(dy[c]) * weight[c];
          ds += dn * x[c];
          db += dn;
        }
        const float b = (db * mean - ds) * rstd * rstd * rstd * inverse_channels;
        const float shift = -b * mean - db * rstd * inverse_channels;
        float* __restrict dx = a.grad_input + r * channels;
        if (a.residual != nullptr) {
          const float* __restrict residual = a.residual + r * channels;
#pragma omp simd
          for (int64_t c = 0; c < channels; ++c)
            dx[c] = (rstd * widen(dy[c]) * weight[c] + b * x[c] + shift) + residual[c];
        } else {
#pragma omp simd
          for (int64_t c = 0; c < channels; ++c)
            dx[c] = rstd * widen(dy[c]) * weight[c] + b * x[c] + shift;
        }
      }
      if (w_sums != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c)
          w_sums[c] += widen(dy[c]) * ((x[c] - mean) * rstd);
      }
      if (b_sums != nullptr)
        add_row_to_sums(dy, b_sums, channels);
    }
  }
}

/// Each chunk's float column sums of values' rows [begin, end) (starting on a chunk boundary)
/// into chunk_sums (chunks, C).
BB_VECTOR_CLONES
void column_sums_range(const c10::BFloat16* values, int64_t channels, int64_t begin, int64_t end,
                       float* chunk_sums) {
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t last = std::min(end, first + kChunkRows);
    float* __restrict sums = zeroed_chunk_sums(chunk_sums, first, channels);
    for (int64_t r = first; r < last; ++r)
      add_row_to_sums(values + r * channels, sums, channels);
  }
}

/// Rows [begin, end) (starting on a chunk boundary) of values rounded to bf16 into out, and each
/// chunk's float column sums of the rounded values into chunk_sums (chunks, C) unless nullptr.
BB_VECTOR_CLONES
void round_rows_range(const float* values, int64_t channels, int64_t begin, int64_t end,
                      c10::BFloat16* out, float* chunk_sums) {
  for (int64_t first = begin; first < end; first += kChunkRows) {
    const int64_t last = std::min(end, first + kChunkRows);
    float* __restrict sums = zeroed_chunk_sums(chunk_sums, first, channels);
    for (int64_t r = first; r < last; ++r) {
      const float* __restrict row = values + r * channels;
      c10::BFloat16* __restrict rounded = out + r * channels;
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c)
        store(rounded + c, row[c]);
      if (sums != nullptr)
        add_row_to_sums(rounded, sums, channels);
    }
  }
}

}  // namespace

void layer_norm_to_bf16_rows(const LayerNormToBf16Rows& args) {
  if (args.output_transposed == nullptr) {
    on_row_parts(args.shape,
                 [&](int64_t, int64_t begin, int64_t end) { layer_norm_range(args, begin, end); });
    return;
  }
  const int64_t rows = args.shape.rows, channels = args.shape.channels;
  on_row_parts(args.shape, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t first = begin; first < end; first += kChunkRows) {
      const int64_t last = std::min(end, first + kChunkRows);
      layer_norm_range(args, first, last);
      transpose_bf16({args.output + first * channels, last - first, channels, channels},
                     args.output_transposed + first, rows);
    }
  });
}

void layer_norm_backward_from_bf16_rows(const LayerNormBackwardFromBf16Rows& args) {
  const int64_t channels = args.shape.channels, chunks = chunk_count(args.shape.rows);
  const auto buffer = [&](const float* wanted) {
    return std::vector<float>(wanted != nullptr ? size_t(chunks * channels) : 0);
  };
  std::vector<float> weight_sums = buffer(args.grad_weight), bias_sums = buffer(args.grad_bias);
  float* w = args.grad_weight != nullptr ? weight_sums.data() : nullptr;
  float* b = args.grad_bias != nullptr ? bias_sums.data() : nullptr;
  on_row_parts(args.shape, [&](int64_t, int64_t begin, int64_t end) {
    layer_norm_backward_range(args, begin, end, w, b);
  });
  if (w != nullptr)
    sum_chunks_in_order(w, chunks, channels, args.grad_weight);
  if (b != nullptr)
    sum_chunks_in_order(b, chunks, channels, args.grad_bias);
}

void bf16_column_sums(const c10::BFloat16* values, RowShape shape, float* sums) {
  on_row_parts_with_column_sums(shape, sums, [&](int64_t begin, int64_t end, float* chunk_sums) {
    column_sums_range(values, shape.channels, begin, end, chunk_sums);
  });
}

void bf16_rows_and_column_sums(const float* values, RowShape shape, c10::BFloat16* out,
                               float* sums) {
  on_row_parts_with_column_sums(shape, sums, [&](int64_t begin, int64_t end, float* chunk_sums) {
    round_rows_range(values, shape.channels, begin, end, out, chunk_sums);
  });
}

}  // namespace bigbatch::nn::kernels
