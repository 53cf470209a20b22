// GCC 12 reports the _mm512_undefined_* values inside its own intrinsics as uninitialized once
// they are inlined; the pragmas must come before the headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "bigbatch/nn/bf16_attention.h"

#include <ATen/Parallel.h>
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/native/CPUBlas.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/system_info.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bigbatch/nn/avx512_transpose.h"
#define BB_BF16_ATTENTION 1
// Only these functions are built for AVX-512 BF16; bf16_attention_available() guards each call.
#define BB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
// And these for AMX as well; bf16_attention_amx_available() guards each call.
#define BB_AMX_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")))
#else
#define BB_BF16_ATTENTION 0
#endif

namespace bigbatch::nn {

/// bf16 values in one row of an AMX tile (64 bytes): the depth of one tile product. The head
/// dimension must be a multiple of it for the products on tiles.
constexpr int64_t kAmxDepth = 32;

bool bf16_attention_available() {
#if BB_BF16_ATTENTION
  static const bool available = [] {
    const std::set<std::string>& flags = this_cpu_flags();
    return flags.count("avx512_bf16") == 1 && flags.count("avx512bw") == 1 &&
           flags.count("avx512vl") == 1 && flags.count("avx512dq") == 1;
  }();
  return available;
#else
  return false;
#endif
}

bool bf16_attention_amx_available() {
#if BB_BF16_ATTENTION
  static const bool available = [] {
    const std::set<std::string>& flags = this_cpu_flags();
    if (!bf16_attention_available() || flags.count("amx_bf16") == 0 || flags.count("amx_tile") == 0)
      return false;
    // Linux hands out the tile registers' state only on request (once per process; oneDNN asks
    // too): arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return available;
#else
  return false;
#endif
}

bool bf16_attention_amx_runs(int64_t head_dim) {
  return head_dim % kAmxDepth == 0 && bf16_attention_amx_available();
}

namespace {

using torch::Tensor;

/// Checks what both passes need of q, k, v and a (B, H, rows, D) tensor `t` named `name`.
void check_operand(const Tensor& t, const char* name, int64_t batch, int64_t heads, int64_t rows,
                   int64_t head_dim) {
  BB_CHECK(
      t.defined() && t.dim() == 4 && t.scalar_type() == torch::kBFloat16 && t.device().is_cpu(),
      "bf16 attention: ", name, " must be a 4-D bfloat16 CPU tensor, got ",
      t.defined() ? t.toString() : std::string("an undefined tensor"),
      t.defined() ? cat(" of shape ", t.sizes()) : std::string());
  BB_CHECK(t.size(0) == batch && t.size(1) == heads && t.size(2) == rows && t.size(3) == head_dim,
           "bf16 attention: ", name, " must have shape (", batch, ", ", heads, ", ", rows, ", ",
           head_dim, "), got ", t.sizes());
  BB_CHECK(t.stride(3) == 1, "bf16 attention: ", name,
           "'s last dimension must be contiguous, got strides ", t.strides());
}

/// The shape of one call, checked.
struct Shape {
  int64_t batch, heads, queries, keys, head_dim;
  int64_t key_heads;  // KV, dividing heads: query head h reads key head h / (heads / KV)
  bool amx = false;   // the products on AMX tiles
  int64_t groups() const { return heads / key_heads; }
};

Shape checked_shape(const Bf16AttentionInputs& in) {
  BB_CHECK(bf16_attention_available(),
           "bf16 attention kernels need an x86-64 CPU with avx512_bf16; this one has none");
  BB_CHECK(in.q.defined() && in.q.dim() == 4, "bf16 attention: q must be (B, H, T, D), got ",
           in.q.defined() ? cat(in.q.sizes()) : std::string("an undefined tensor"));
  const int64_t key_heads = in.k.defined() && in.k.dim() == 4 ? in.k.size(1) : 0;
  Shape s{in.q.size(0), in.q.size(1), in.q.size(2), in.k.defined() ? in.k.size(2) : 0,
          in.q.size(3), key_heads};
  s.amx = in.use_amx && bf16_attention_amx_runs(s.head_dim);
  BB_CHECK(s.head_dim % 2 == 0, "bf16 attention: the head dimension must be even, got ",
           s.head_dim);
  BB_CHECK(key_heads > 0 && s.heads % key_heads == 0, "bf16 attention: the ", key_heads,
           " key heads must divide the ", s.heads, " query heads");
  check_operand(in.q, "q", s.batch, s.heads, s.queries, s.head_dim);
  check_operand(in.k, "k", s.batch, key_heads, s.keys, s.head_dim);
  check_operand(in.v, "v", s.batch, key_heads, s.keys, s.head_dim);
  const Tensor& padding = in.mask.padding;
  BB_CHECK(
      !padding.defined() || (padding.scalar_type() == torch::kBool && padding.dim() == 2 &&
                             padding.size(0) == s.batch && padding.size(1) == s.keys),
      "bf16 attention: the padding mask must be (", s.batch, ", ", s.keys, ") bool, got ",
      padding.defined() ? cat(padding.toString(), " of shape ", padding.sizes()) : std::string());
  return s;
}

constexpr int64_t kLanes = 16;     // floats in a vector
constexpr int64_t kBlockRows = 8;  // rows of a vdpbf16ps product tile: operands are padded to them
constexpr int64_t kAmxBlockRows = 16;  // rows of a product on AMX tiles (a tile's most)

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

/// The padded sizes of one head's operands and the rows of a row block. The tile products sum
/// over whole tile depths of pairs: of keys (S/2) and of stacked queries (G T/2), so those are
/// padded to kAmxDepth there.
struct Padded {
  int64_t queries, keys, dim;  // T to the block, S and D to kLanes; T, S to kAmxDepth on tiles
  int64_t block;               // kBlockRows, or kAmxBlockRows on tiles
  explicit Padded(const Shape& s)
      : queries(round_up(s.queries, s.amx ? kAmxDepth : kBlockRows)),
        keys(round_up(s.keys, s.amx ? kAmxDepth : kLanes)),
        dim(round_up(s.head_dim, kLanes)),
        block(s.amx ? kAmxBlockRows : kBlockRows) {}
};

#if BB_BF16_ATTENTION

using Bits = uint16_t;  // a bf16 value's bits
using Pair = uint32_t;  // two bf16 values, the first in the low half (vdpbf16ps's order)

/// The (rows, cols) bf16 matrix of one head: row r at data + r * stride, its values contiguous.
struct Rows {
  const Bits* data;
  int64_t stride, rows, cols;
  const Bits* row(int64_t r) const { return data + r * stride; }
};

/// A (B, H, rows, D) bf16 tensor's heads, read once from the tensor (whose accessors cost more
/// than the arithmetic of a row).
struct Heads {
  Bits* data;
  int64_t batch_stride, head_stride, row_stride, rows, cols;
  explicit Heads(const Tensor& t)
      : data(reinterpret_cast<Bits*>(t.data_ptr<at::BFloat16>())),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        row_stride(t.stride(2)),
        rows(t.size(2)),
        cols(t.size(3)) {}
  Bits* row(int64_t b, int64_t h, int64_t r) const {
    return data + b * batch_stride + h * head_stride + r * row_stride;
  }
  Rows head(int64_t b, int64_t h) const { return {row(b, h, 0), row_stride, rows, cols}; }
};

/// Buffers up to this size are kept by each thread between calls (the kernels run for every block
/// of every micro-batch, and fresh buffers would cost an allocation and its page faults each
/// time); larger ones, of long contexts, are allocated per call and freed.
constexpr size_t kKeptBytes = size_t(1) << 20;

/// `count` values of scratch memory, one per `kWhich`: the calling thread's kept buffer, or one of
/// its own when larger than kKeptBytes. It holds whatever the last call left in it.
template <class T, int kWhich>
class Scratch {
 public:
  explicit Scratch(int64_t count) {
    if (size_t(count) * sizeof(T) > kKeptBytes) {
      own_.resize(size_t(count));
      data_ = own_.data();
      return;
    }
    thread_local std::vector<T> kept;
    if (kept.size() < size_t(count))
      kept.resize(size_t(count));
    data_ = kept.data();
  }
  T* get() const { return data_; }

 private:
  std::vector<T> own_;
  T* data_ = nullptr;
};

/// dst (rows_pad, cols) bf16, row-major: src's rows, zero below them.
BB_BF16_TARGET void copy_rows(const Rows& src, Bits* dst, int64_t rows_pad) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    Bits* out = dst + r * src.cols;
    if (r < src.rows)
      std::memcpy(out, src.row(r), size_t(src.cols) * sizeof(Bits));
    else
      std::memset(out, 0, size_t(src.cols) * sizeof(Bits));
  }
}

/// A product's A operand: rows of pairs, `stride` pairs apart.
struct Operand {
  const Pair* data;
  int64_t stride;
};

/// The rows of src, rows_pad of them, as an A operand: src itself where it has them all and its
/// pairs are 32-bit aligned, else a copy in `copy` (rows_pad, src.cols), zero below src's rows.
BB_BF16_TARGET Operand row_operand(const Rows& src, int64_t rows_pad, Bits* copy) {
  if (src.rows == rows_pad && src.stride % 2 == 0 &&
      reinterpret_cast<uintptr_t>(src.data) % alignof(Pair) == 0)
    return {reinterpret_cast<const Pair*>(src.data), src.stride / 2};
  copy_rows(src, copy, rows_pad);
  return {reinterpret_cast<const Pair*>(copy), src.cols / 2};
}

/// Pairs down the rows, the B operand of a product that sums over src's rows:
/// dst[r/2][c] = (src[r][c], src[r+1][c]) for even r < rows_pad and c < width, zero outside src.
BB_BF16_TARGET void pair_rows(const Rows& src, Pair* dst, int64_t rows_pad, int64_t width) {
  for (int64_t r = 0; r < rows_pad; r += 2) {
    Pair* __restrict out = dst + (r / 2) * width;
    int64_t c = 0;
    if (r + 1 < src.rows) {
      const Bits* __restrict first = src.row(r);
      const Bits* __restrict second = src.row(r + 1);
      for (; c < src.cols; ++c)
        out[c] = Pair(first[c]) | Pair(second[c]) << 16;
    } else if (r < src.rows) {
      const Bits* __restrict first = src.row(r);
      for (; c < src.cols; ++c)
        out[c] = Pair(first[c]);
    }
    for (; c < width; ++c)
      out[c] = 0;
  }
}

/// dst (16, 16) = src (16, 16)^T, 32-bit values, rows `src_stride` and `dst_stride` apart.
BB_BF16_TARGET void transpose_tile(const Pair* src, int64_t src_stride, Pair* dst,
                                   int64_t dst_stride) {
  __m512i rows[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    rows[i] = _mm512_loadu_si512(src + i * src_stride);
  kernels::store_transposed_16x16(rows, dst, dst_stride * int64_t(sizeof(Pair)));
}

/// dst[c][r] = src[r][c] for r < rows and c < cols, rows `src_stride` and `dst_stride` apart:
/// whole 16 x 16 tiles in registers, the edges one value at a time.
BB_BF16_TARGET void transpose(const Pair* src, int64_t src_stride, int64_t rows, int64_t cols,
                              Pair* dst, int64_t dst_stride) {
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      if (r0 + kTile <= rows && c0 + kTile <= cols) {
        transpose_tile(src + r0 * src_stride + c0, src_stride, dst + c0 * dst_stride + r0,
                       dst_stride);
        continue;
      }
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          dst[c * dst_stride + r] = src[r * src_stride + c];
    }
  }
}

/// Pairs along the rows, transposed: the B operand of a product by src^T summing over src's
/// columns (q k^T, dy v^T). dst[p][r] = (src[r][2p], src[r][2p+1]) for r < width, zero past src.
BB_BF16_TARGET void transpose_row_pairs(const Rows& src, Pair* dst, int64_t width) {
  const int64_t pairs = src.cols / 2;
  if (src.stride % 2 == 0 && reinterpret_cast<uintptr_t>(src.data) % alignof(Pair) == 0) {
    transpose(reinterpret_cast<const Pair*>(src.data), src.stride / 2, src.rows, pairs, dst, width);
  } else {  // rows whose pairs are not 32-bit aligned
    for (int64_t r = 0; r < src.rows; ++r)
      for (int64_t p = 0; p < pairs; ++p)
        std::memcpy(dst + p * width + r, src.row(r) + 2 * p, sizeof(Pair));
  }
  for (int64_t p = 0; p < pairs; ++p)
    std::fill(dst + p * width + src.rows, dst + (p + 1) * width, Pair(0));
}

/// One product of the kernels: c (rows, kLanes * vectors) = a (rows, pairs [begin, end)) b,
/// where a . b multiplies the two bf16 of each pair and adds both in float; rows is kBlockRows on
/// vdpbf16ps and kAmxBlockRows on tiles.
/// a's rows are lda pairs apart, b's pair rows ldb, c's rows ldc floats.
struct Product {
  const Pair* a;
  int64_t lda;
  const Pair* b;
  int64_t ldb;
  int64_t begin, end, vectors;
  float* c;
  int64_t ldc;
};

/// c[r][n] of p for r < kBlockRows and n < kLanes * kVectors, on vdpbf16ps.
template <int kVectors>
BB_BF16_TARGET void product_tile(const Product& p, const Pair* b, float* c) {
  __m512 acc[kBlockRows][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < kBlockRows; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < kVectors; ++n)
      acc[r][n] = _mm512_setzero_ps();
  for (int64_t k = p.begin; k < p.end; ++k) {
    __m512bh bv[kVectors];
#pragma GCC unroll 4
    for (int n = 0; n < kVectors; ++n)
      bv[n] = (__m512bh)_mm512_loadu_si512(b + k * p.ldb + n * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < kBlockRows; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(p.a[r * p.lda + k]));
#pragma GCC unroll 4
      for (int n = 0; n < kVectors; ++n)
        acc[r][n] = _mm512_dpbf16_ps(acc[r][n], av, bv[n]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kBlockRows; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < kVectors; ++n)
      _mm512_storeu_ps(c + r * p.ldc + n * kLanes, acc[r][n]);
}

/// p on vdpbf16ps, in tiles of up to three vectors (24 accumulators of the 32 registers).
BB_BF16_TARGET void vector_product(const Product& p) {
  for (int64_t n = 0; n < p.vectors;) {
    const int64_t left = p.vectors - n;
    const int64_t width = left == 4 ? 2 : std::min<int64_t>(left, 3);
    const Pair* bn = p.b + n * kLanes;
    float* cn = p.c + n * kLanes;
    if (width == 3)
      product_tile<3>(p, bn, cn);
    else if (width == 2)
      product_tile<2>(p, bn, cn);
    else
      product_tile<1>(p, bn, cn);
    n += width;
  }
}

/// The tile registers' layout while the kernels run (ldtilecfg's 64 bytes, palette 1): tiles
/// 0-3 hold c (kAmxBlockRows x 16 floats each), tile 4 a row block of a (kAmxBlockRows x 32 bf16),
/// tiles 5 and 6 b (16 pair rows x 16 pairs), alternately.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

/// Configures the calling thread's tiles as TileConfig says for as long as it lives, where
/// `use`; releases them after (LibTorch's own tile products configure theirs again).
class AmxTiles {
 public:
  explicit AmxTiles(bool use) : use_(use) {
    if (use_)
      configure();
  }
  ~AmxTiles() {
    if (use_)
      release();
  }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

 private:
  BB_AMX_TARGET static void configure() {
    TileConfig config;
    for (int t = 0; t < 4; ++t)
      config.rows[t] = kAmxBlockRows;
    config.rows[4] = kAmxBlockRows;
    config.rows[5] = config.rows[6] = kAmxDepth / 2;
    for (int t = 0; t < 7; ++t)
      config.bytes_per_row[t] = 64;
    // GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, which lets it drop the
    // stores of the rest; this operand is all 64.
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
  }
  BB_AMX_TARGET static void release() {
    _tile_release();
#if TORCH_VERSION_MAJOR >= 2
    // LibTorch's brgemm remembers which configuration the thread's tiles hold; forget it.
    at::native::cpublas::brgemm_release();
#endif
  }
  bool use_;
};

/// Zeroes the c tiles 0 .. kTiles - 1.
template <int kTiles>
BB_AMX_TARGET void zero_c_tiles() {
  static_assert(kTiles >= 1 && kTiles <= 4, "four c tiles");
  _tile_zero(0);
  if constexpr (kTiles > 1)
    _tile_zero(1);
  if constexpr (kTiles > 2)
    _tile_zero(2);
  if constexpr (kTiles > 3)
    _tile_zero(3);
}

/// Stores c tile t (t < kTiles) at c + t * step, its rows ldc floats apart.
template <int kTiles>
BB_AMX_TARGET void store_c_tiles(float* c, int64_t step, int64_t ldc) {
  const int64_t bytes = ldc * int64_t(sizeof(float));
  _tile_stored(0, c, bytes);
  if constexpr (kTiles > 1)
    _tile_stored(1, c + step, bytes);
  if constexpr (kTiles > 2)
    _tile_stored(2, c + 2 * step, bytes);
  if constexpr (kTiles > 3)
    _tile_stored(3, c + 3 * step, bytes);
}

/// Columns [16 n0, 16 (n0 + kTiles)) of p on AMX tiles (AmxTiles configured), p's range of
/// pairs in whole tile depths.
template <int kTiles>
BB_AMX_TARGET void tile_product(const Product& p, int64_t begin, int64_t end, int64_t n0) {
  const int64_t a_bytes = p.lda * int64_t(sizeof(Pair)), b_bytes = p.ldb * int64_t(sizeof(Pair));
  zero_c_tiles<kTiles>();
  for (int64_t k = begin; k < end; k += kAmxDepth / 2) {
    const Pair* b = p.b + k * p.ldb + n0 * kLanes;
    _tile_loadd(4, p.a + k, a_bytes);
    _tile_loadd(5, b, b_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (kTiles > 1) {
      _tile_loadd(6, b + kLanes, b_bytes);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (kTiles > 2) {
      _tile_loadd(5, b + 2 * kLanes, b_bytes);
      _tile_dpbf16ps(2, 4, 5);
    }
    if constexpr (kTiles > 3) {
      _tile_loadd(6, b + 3 * kLanes, b_bytes);
      _tile_dpbf16ps(3, 4, 6);
    }
  }
  store_c_tiles<kTiles>(p.c + n0 * kLanes, kLanes, p.ldc);
}

/// p on AMX tiles, its range of pairs widened to whole tile depths: the operands must be there
/// (Padded's sizes) and a or b zero in the pairs added (past a query's keys, or before the
/// queries that see a key under a causal mask).
BB_AMX_TARGET void amx_product(const Product& p) {
  constexpr int64_t kStep = kAmxDepth / 2;
  const int64_t begin = p.begin / kStep * kStep, end = round_up(p.end, kStep);
  for (int64_t n = 0; n < p.vectors; n += 4) {
    switch (std::min<int64_t>(p.vectors - n, 4)) {
      case 4:
        tile_product<4>(p, begin, end, n);
        break;
      case 3:
        tile_product<3>(p, begin, end, n);
        break;
      case 2:
        tile_product<2>(p, begin, end, n);
        break;
      default:
        tile_product<1>(p, begin, end, n);
    }
  }
}

/// Rows [r0, r0 + 16 kTiles) of a single column of kLanes of p on AMX tiles (AmxTiles
/// configured), the c tiles stacked down the rows and the a tiles loaded alternately into tiles 4
/// and 6, p's range of pairs in whole tile depths.
template <int kTiles>
BB_AMX_TARGET void tile_column(const Product& p, int64_t begin, int64_t end, int64_t r0) {
  const int64_t a_bytes = p.lda * int64_t(sizeof(Pair)), b_bytes = p.ldb * int64_t(sizeof(Pair));
  const Pair* a = p.a + r0 * p.lda;
  const int64_t a_step = kAmxBlockRows * p.lda;  // pairs from one row block of a to the next
  zero_c_tiles<kTiles>();
  for (int64_t k = begin; k < end; k += kAmxDepth / 2) {
    _tile_loadd(5, p.b + k * p.ldb, b_bytes);
    _tile_loadd(4, a + k, a_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (kTiles > 1) {
      _tile_loadd(6, a + a_step + k, a_bytes);
      _tile_dpbf16ps(1, 6, 5);
    }
    if constexpr (kTiles > 2) {
      _tile_loadd(4, a + 2 * a_step + k, a_bytes);
      _tile_dpbf16ps(2, 4, 5);
    }
    if constexpr (kTiles > 3) {
      _tile_loadd(6, a + 3 * a_step + k, a_bytes);
      _tile_dpbf16ps(3, 6, 5);
    }
  }
  store_c_tiles<kTiles>(p.c + r0 * p.ldc, kAmxBlockRows * p.ldc, p.ldc);
}

/// column_product on AMX tiles, rows a multiple of kAmxBlockRows; the range of pairs widened as
/// amx_product widens it.
BB_AMX_TARGET void amx_column_product(const Product& p, int64_t rows) {
  constexpr int64_t kStep = kAmxDepth / 2;
  const int64_t begin = p.begin / kStep * kStep, end = round_up(p.end, kStep);
  for (int64_t r0 = 0; r0 < rows; r0 += 4 * kAmxBlockRows) {
    switch (std::min<int64_t>((rows - r0) / kAmxBlockRows, 4)) {
      case 4:
        tile_column<4>(p, begin, end, r0);
        break;
      case 3:
        tile_column<3>(p, begin, end, r0);
        break;
      case 2:
        tile_column<2>(p, begin, end, r0);
        break;
      default:
        tile_column<1>(p, begin, end, r0);
    }
  }
}

/// p on AMX tiles where the shape says so, else on vdpbf16ps.
BB_BF16_TARGET void product(const Product& p, const Shape& s) {
  if (s.amx)
    amx_product(p);
  else
    vector_product(p);
}

/// The lanes of a vector starting at `j` that lie below `n`.
BB_BF16_TARGET __mmask16 lanes_below(int64_t j, int64_t n) {
  const int64_t left = n - j;
  if (left <= 0)
    return 0;
  return left >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
}

/// exp(x) for x <= 88 (Cephes' expf polynomial on [-ln2/2, ln2/2] times 2^n, within 1 ulp);
/// 0 below -87 and NaN for NaN.
BB_BF16_TARGET __m512 exp_vector(__m512 x) {
  const __m512 low = _mm512_set1_ps(-87.0f);
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(x, low), _mm512_set1_ps(88.0f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512 result = _mm512_scalef_ps(y, n);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, low, _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(nan, _mm512_maskz_mov_ps(__mmask16(~underflow), result), x);
}

/// Stores v's lanes below `count` rounded to bf16 (to nearest even) at out.
BB_BF16_TARGET void store_bf16(Bits* out, __m512 v, __mmask16 lanes) {
  const __m256i bits = (__m256i)_mm512_cvtneps_pbh(v);
  _mm256_mask_storeu_epi16(out, lanes, bits);
}

/// Rows r0 .. r0 + rows (those `to` has) of head (b, h) of `to`, rounded to bf16 from the float
/// rows of `in` (row stride in_stride).
BB_BF16_TARGET void store_block(const float* in, int64_t in_stride, const Heads& to, int64_t b,
                                int64_t h, int64_t r0, int64_t rows) {
  for (int64_t r = r0; r < std::min(to.rows, r0 + rows); ++r) {
    const float* values = in + (r - r0) * in_stride;
    Bits* out = to.row(b, h, r);
    for (int64_t j = 0; j < to.cols; j += kLanes) {
      const __mmask16 lanes = lanes_below(j, to.cols);
      store_bf16(out + j, _mm512_maskz_loadu_ps(lanes, values + j), lanes);
    }
  }
}

/// One query's softmax numerators from its raw scores q.k (`scores`, changed): exp(scale * score
/// + bias - max) over its first `n` keys, n > 0 (past them, up to the next whole vector, zero;
/// further, whatever was there). Returns 1 / their sum. A query whose n keys are all masked (a
/// bias of -inf each) has no max: its numerators and so its probabilities are NaN.
BB_BF16_TARGET float softmax_numerators(float* scores, const float* bias, int64_t n, float scale) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 max = neg_inf;
  for (int64_t j = 0; j < n; j += kLanes) {
    const __mmask16 lanes = lanes_below(j, n);
    const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lanes, scores + j),
                                     _mm512_set1_ps(scale), _mm512_maskz_loadu_ps(lanes, bias + j));
    const __m512 kept = _mm512_mask_mov_ps(neg_inf, lanes, x);
    _mm512_storeu_ps(scores + j, kept);
    max = _mm512_max_ps(max, kept);
  }
  const float top = _mm512_reduce_max_ps(max);
  const __m512 shift =
      _mm512_set1_ps(top == -std::numeric_limits<float>::infinity() ? std::nanf("") : top);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += kLanes) {  // past n in the last vector: exp(-inf) = 0
    const __m512 e = exp_vector(_mm512_sub_ps(_mm512_loadu_ps(scores + j), shift));
    _mm512_storeu_ps(scores + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  return 1.0f / _mm512_reduce_add_ps(sum);
}

/// Rounds v0 and v1, two rows' values at columns [j, j + kLanes), to bf16 (to nearest even) into
/// the rows row0 and row1 and into their pairs of rows (row0's in the low halves) at pairs.
BB_BF16_TARGET void store_row_pair(__m512 v0, __m512 v1, Bits* row0, Bits* row1, Pair* pairs,
                                   int64_t j) {
  const __m256i bits0 = (__m256i)_mm512_cvtneps_pbh(v0);
  const __m256i bits1 = (__m256i)_mm512_cvtneps_pbh(v1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(row0 + j), bits0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(row1 + j), bits1);
  _mm512_storeu_si512(pairs + j,
                      _mm512_or_si512(_mm512_cvtepu16_epi32(bits0),
                                      _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits1), 16)));
}

/// Zeroes two rows and their pairs of rows at columns [from, width), from a whole vector.
BB_BF16_TARGET void zero_row_pair(Bits* row0, Bits* row1, Pair* pairs, int64_t from,
                                  int64_t width) {
  for (int64_t j = from; j < width; j += kLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row0 + j), _mm256_setzero_si256());
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row1 + j), _mm256_setzero_si256());
    _mm512_storeu_si512(pairs + j, _mm512_setzero_si512());
  }
}

/// Two queries' probabilities, their numerators e0 and e1 over their first n0 and n1 keys
/// (softmax_numerators) times inverse0 and inverse1, rounded to bf16 into the rows p0 and p1 and
/// their pairs of rows; all three zero from there to width.
BB_BF16_TARGET void store_probability_pair(const float* e0, float inverse0, int64_t n0,
                                           const float* e1, float inverse1, int64_t n1, Bits* p0,
                                           Bits* p1, Pair* pairs, int64_t width) {
  const __m512 scale0 = _mm512_set1_ps(inverse0), scale1 = _mm512_set1_ps(inverse1);
  const int64_t n = std::max(n0, n1);
  for (int64_t j = 0; j < n; j += kLanes)
    store_row_pair(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes_below(j, n0), e0 + j), scale0),
                   _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes_below(j, n1), e1 + j), scale1), p0, p1,
                   pairs, j);
  zero_row_pair(p0, p1, pairs, round_up(n, kLanes), width);
}

/// The probabilities of two rows at keys [j, j + kLanes) from their pairs of rows p (the first
/// row's in the low halves), widened to float (exact): p0 in lanes0, p1 in lanes1, zero elsewhere.
BB_BF16_TARGET void widen_pairs(const Pair* p, int64_t j, __mmask16 lanes0, __mmask16 lanes1,
                                __m512* p0, __m512* p1) {
  const __m512i pairs = _mm512_maskz_loadu_epi32(__mmask16(lanes0 | lanes1), p + j);
  *p0 = _mm512_maskz_mov_ps(lanes0, _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)));
  *p1 = _mm512_maskz_mov_ps(
      lanes1, _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int(0xFFFF0000u)))));
}

/// Two queries' score gradients, rows i and i + 1 of a row block, from their d probs (dp0, dp1,
/// float) and their probabilities, one pair of rows of the forward's (P[i][j] in the low half of
/// p[j]), over their first n0 and n1 keys: p * (dp - sum(p * dp)) * scale, rounded to bf16 into
/// the rows ds0 and ds1 and into the pairs of rows ds_pairs; all three are zero from n to width.
BB_BF16_TARGET void softmax_backward_pair(const float* dp0, const float* dp1, const Pair* p,
                                          int64_t n0, int64_t n1, float scale, Bits* ds0, Bits* ds1,
                                          Pair* ds_pairs, int64_t width) {
  __m512 dot0 = _mm512_setzero_ps(), dot1 = _mm512_setzero_ps();
  for (int64_t j = 0; j < std::max(n0, n1); j += kLanes) {
    const __mmask16 lanes0 = lanes_below(j, n0), lanes1 = lanes_below(j, n1);
    __m512 p0, p1;
    widen_pairs(p, j, lanes0, lanes1, &p0, &p1);
    dot0 = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(lanes0, dp0 + j), dot0);
    dot1 = _mm512_fmadd_ps(p1, _mm512_maskz_loadu_ps(lanes1, dp1 + j), dot1);
  }
  const __m512 total0 = _mm512_set1_ps(_mm512_reduce_add_ps(dot0));
  const __m512 total1 = _mm512_set1_ps(_mm512_reduce_add_ps(dot1));
  const __m512 scales = _mm512_set1_ps(scale);
  const int64_t n = std::max(n0, n1);
  for (int64_t j = 0; j < n; j += kLanes) {
    const __mmask16 lanes0 = lanes_below(j, n0), lanes1 = lanes_below(j, n1);
    __m512 p0, p1;
    widen_pairs(p, j, lanes0, lanes1, &p0, &p1);
    const __m512 g0 = _mm512_mul_ps(
        _mm512_mul_ps(p0, _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes0, dp0 + j), total0)), scales);
    const __m512 g1 = _mm512_mul_ps(
        _mm512_mul_ps(p1, _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes1, dp1 + j), total1)), scales);
    store_row_pair(_mm512_maskz_mov_ps(lanes0, g0), _mm512_maskz_mov_ps(lanes1, g1), ds0, ds1,
                   ds_pairs, j);
  }
  zero_row_pair(ds0, ds1, ds_pairs, round_up(n, kLanes), width);
}

/// The keys row block [i0, i0 + pad.block) scores: all, or under a causal mask those up to its
/// last query, in whole vectors.
int64_t keys_scored(const Padded& pad, bool causal, int64_t i0) {
  return causal ? std::min(pad.keys, round_up(i0 + pad.block, kLanes)) : pad.keys;
}
/// The key pairs whose values row block [i0, i0 + pad.block) weighs.
int64_t key_pairs_weighed(const Shape& s, const Padded& pad, bool causal, int64_t i0) {
  return causal ? std::min(pad.keys / 2, (std::min(s.keys, i0 + pad.block) + 1) / 2) : pad.keys / 2;
}
/// c (pad.block, keys_scored) = the row block at i0 of a (T, D) operand, times the keys' or
/// values' transposed pairs bt (D/2, S): scores (q k^T) or d probs (dy v^T).
BB_BF16_TARGET void times_keys(const Operand& a, const Pair* bt, const Shape& s, const Padded& pad,
                               bool causal, int64_t i0, float* c) {
  product({a.data + i0 * a.stride, a.stride, bt, pad.keys, 0, s.head_dim / 2,
           keys_scored(pad, causal, i0) / kLanes, c, pad.keys},
          s);
}

/// c (rows, kLanes) = a (rows, pairs [begin, end)) b for a single column of kLanes, rows a
/// multiple of the block rows: p's a and c at row 0, p.vectors 1.
BB_BF16_TARGET void column_product(const Product& p, int64_t rows, const Shape& s) {
  if (s.amx) {
    amx_column_product(p, rows);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows)
    vector_product(
        {p.a + r0 * p.lda, p.lda, p.b, p.ldb, p.begin, p.end, 1, p.c + r0 * p.ldc, p.ldc});
}

/// Rows j0 .. j0 + kLanes (those `to` has) of head (b, h) of `to`, rounded to bf16 from the
/// columns of c (pad.dim, kLanes): row j0 + n of the head is column n of c. `transposed`
/// (kLanes, pad.dim) is scratch.
BB_BF16_TARGET void store_columns(const float* c, const Padded& pad, const Heads& to, int64_t b,
                                  int64_t h, int64_t j0, float* transposed) {
  for (int64_t d0 = 0; d0 < pad.dim; d0 += kLanes) {
    __m512i rows[kLanes];
#pragma GCC unroll 16
    for (int64_t i = 0; i < kLanes; ++i)
      rows[i] = _mm512_loadu_si512(c + (d0 + i) * kLanes);
    kernels::store_transposed_16x16(rows, transposed + d0, pad.dim * int64_t(sizeof(float)));
  }
  store_block(transposed, pad.dim, to, b, h, j0, kLanes);
}

/// The keys query i attends to: a prefix.
int64_t keys_of_query(const Shape& s, bool causal, int64_t i) {
  return causal ? std::min(s.keys, i + 1) : s.keys;
}

/// (B, width) floats: 0 at each key of batch entry b that queries may attend to, -inf at padding
/// and past S.
std::vector<float> key_biases(const Bf16AttentionMask& mask, const Shape& s, int64_t width) {
  std::vector<float> biases(size_t(s.batch * width), -std::numeric_limits<float>::infinity());
  const Tensor padding = mask.padding.defined() ? mask.padding.contiguous() : Tensor();
  const bool* blocked = padding.defined() ? padding.data_ptr<bool>() : nullptr;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.keys; ++j)
      if (!blocked || !blocked[b * s.keys + j])
        biases[size_t(b * width + j)] = 0.0f;
  return biases;
}

/// What forward_heads reads and writes, read once from the tensors.
struct ForwardOperands {
  Heads q, k, v, y;
  Pair* probs;          // (B, H, Tp/2, Sp): pairs of rows of the probabilities
  const float* biases;  // key_biases()
  bool causal;
  float scale;
};

/// Forward of key heads [begin, end) of the B * KV, each with its query heads: for each query row
/// block the scores, the probabilities (also written to op.probs, in pairs of rows) and y.
BB_BF16_TARGET void forward_heads(const ForwardOperands& op, const Shape& s, int64_t begin,
                                  int64_t end) {
  const Padded pad(s);
  const int64_t half_dim = s.head_dim / 2, query_pairs = pad.queries / 2;
  const Scratch<Bits, 0> q_rows_memory(pad.queries * s.head_dim);  // (T, D)
  Bits* q_rows = q_rows_memory.get();
  const Scratch<Pair, 1> k_t_memory(half_dim * pad.keys);  // (D/2, S)
  Pair* k_t = k_t_memory.get();
  const Scratch<Pair, 2> v_pairs_memory(pad.keys / 2 * pad.dim);  // (S/2, D)
  Pair* v_pairs = v_pairs_memory.get();
  const Scratch<float, 3> scores_memory(pad.block * pad.keys);  // a row block's
  float* scores = scores_memory.get();
  const Scratch<Bits, 4> p_rows_memory(pad.block * pad.keys);  // a row block's
  Bits* p_rows = p_rows_memory.get();
  const Scratch<float, 5> out_memory(pad.block * pad.dim);  // a row block's
  float* out = out_memory.get();
  float inverses[kAmxBlockRows];  // a row block's 1 / softmax denominators
  int64_t keys[kAmxBlockRows];    // and the keys each of its queries attends to
  const AmxTiles tiles(s.amx);
  for (int64_t bk = begin; bk < end; ++bk) {  // key heads; each serves `groups` query heads
    const int64_t b = bk / s.key_heads, kv = bk % s.key_heads;
    transpose_row_pairs(op.k.head(b, kv), k_t, pad.keys);
    pair_rows(op.v.head(b, kv), v_pairs, pad.keys, pad.dim);
    const float* bias = op.biases + b * pad.keys;
    for (int64_t h = kv * s.groups(); h < (kv + 1) * s.groups(); ++h) {
      const Operand q = row_operand(op.q.head(b, h), pad.queries, q_rows);
      Pair* probs = op.probs + (b * s.heads + h) * query_pairs * pad.keys;  // (Tp/2, Sp)
      for (int64_t i0 = 0; i0 < s.queries; i0 += pad.block) {
        times_keys(q, k_t, s, pad, op.causal, i0, scores);
        for (int64_t r = 0; r < pad.block; ++r) {  // a padding row has no key: zero
          const int64_t i = i0 + r;
          keys[r] = i < s.queries ? keys_of_query(s, op.causal, i) : 0;
          inverses[r] = keys[r] > 0
                            ? softmax_numerators(scores + r * pad.keys, bias, keys[r], op.scale)
                            : 0.0f;
        }
        for (int64_t r = 0; r < pad.block; r += 2)
          store_probability_pair(scores + r * pad.keys, inverses[r], keys[r],
                                 scores + (r + 1) * pad.keys, inverses[r + 1], keys[r + 1],
                                 p_rows + r * pad.keys, p_rows + (r + 1) * pad.keys,
                                 probs + (i0 + r) / 2 * pad.keys, pad.keys);
        product({reinterpret_cast<const Pair*>(p_rows), pad.keys / 2, v_pairs, pad.dim, 0,
                 key_pairs_weighed(s, pad, op.causal, i0), pad.dim / kLanes, out, pad.dim},
                s);
        store_block(out, pad.dim, op.y, b, h, i0, pad.block);
      }
      // Past the last row block, where the tiles pad the queries further: zero.
      const int64_t written = round_up(s.queries, pad.block) / 2;
      std::fill(probs + written * pad.keys, probs + query_pairs * pad.keys, Pair(0));
    }
  }
}

/// What backward_heads reads and writes, read once from the tensors.
struct BackwardOperands {
  Heads q, k, v, dy, dq, dk, dv;
  const Pair* probs;  // (B, H, Tp/2, Sp): pairs of rows of the probabilities
  bool causal;
  float scale;
};

/// The pairs of rows of src (T, D), transposed: the A operand of a product by a (T, S) operand
/// given in pairs of rows. dst[d][t/2] = (src[t][d], src[t+1][d]) for d < pad.dim (zero past D)
/// and t < pad.queries (zero past T), rows `stride` pairs apart. `pairs` (Tp/2, pad.dim) is
/// scratch.
BB_BF16_TARGET void transposed_row_pairs(const Rows& src, const Padded& pad, Pair* pairs, Pair* dst,
                                         int64_t stride) {
  pair_rows(src, pairs, pad.queries, pad.dim);
  transpose(pairs, pad.dim, pad.queries / 2, pad.dim, dst, stride);
}

/// Backward of key heads [begin, end) of the B * KV: per query head and row block of queries d
/// probs, d scores and dq, then per column of keys dv^T = dy^T P and dk^T = q^T dS over the
/// stacked queries of the key head's query heads (P and dS in pairs of rows, the operand layout
/// of a product that sums over queries: no transpose of either).
BB_BF16_TARGET void backward_heads(const BackwardOperands& op, const Shape& s, int64_t begin,
                                   int64_t end) {
  const Padded pad(s);
  const int64_t half_dim = s.head_dim / 2, query_pairs = pad.queries / 2;
  // The queries of a key head's `groups` query heads are stacked for dk and dv, whose sums run
  // over all of them (G T rows).
  const int64_t groups = s.groups(), stacked_pairs = groups * query_pairs;
  const Scratch<Bits, 10> dy_rows_memory(pad.queries * s.head_dim);  // (T, D)
  Bits* dy_rows = dy_rows_memory.get();
  const Scratch<Pair, 11> v_t_memory(half_dim * pad.keys);  // (D/2, S)
  Pair* v_t = v_t_memory.get();
  const Scratch<Pair, 12> k_pairs_memory(pad.keys / 2 * pad.dim);  // (S/2, D)
  Pair* k_pairs = k_pairs_memory.get();
  const Scratch<Pair, 13> row_pairs_memory(query_pairs * pad.dim);  // (T/2, D)
  Pair* row_pairs = row_pairs_memory.get();
  const Scratch<Pair, 14> q_t_memory(pad.dim * stacked_pairs);  // (D, G T/2)
  Pair* q_t = q_t_memory.get();
  const Scratch<Pair, 15> dy_t_memory(pad.dim * stacked_pairs);  // (D, G T/2)
  Pair* dy_t = dy_t_memory.get();
  const Scratch<Pair, 16> ds_pairs_memory(stacked_pairs * pad.keys);  // (G T/2, S)
  Pair* ds_pairs = ds_pairs_memory.get();
  const Scratch<Bits, 17> ds_memory(pad.block * pad.keys);  // a row block's
  Bits* ds = ds_memory.get();
  const Scratch<float, 18> dp_memory(pad.block * pad.keys);  // a row block's
  float* dp = dp_memory.get();
  const Scratch<float, 19> out_memory(std::max(pad.block, kLanes) *
                                      pad.dim);  // a row block's, or (D, kLanes)
  float* out = out_memory.get();
  const Scratch<float, 20> columns_memory(kLanes * pad.dim);  // (kLanes, D)
  float* columns = columns_memory.get();
  const AmxTiles tiles(s.amx);
  for (int64_t bk = begin; bk < end; ++bk) {  // key heads
    const int64_t b = bk / s.key_heads, kv = bk % s.key_heads;
    transpose_row_pairs(op.v.head(b, kv), v_t, pad.keys);
    pair_rows(op.k.head(b, kv), k_pairs, pad.keys, pad.dim);
    // The probabilities of the key head's query heads, stacked: (G T/2, S) pairs.
    const Pair* p_stack = op.probs + (b * s.heads + kv * groups) * query_pairs * pad.keys;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t h = kv * groups + g;
      const Rows dy_head = op.dy.head(b, h);
      const Operand dy = row_operand(dy_head, pad.queries, dy_rows);
      transposed_row_pairs(op.q.head(b, h), pad, row_pairs, q_t + g * query_pairs, stacked_pairs);
      transposed_row_pairs(dy_head, pad, row_pairs, dy_t + g * query_pairs, stacked_pairs);
      const Pair* p_head = p_stack + g * query_pairs * pad.keys;
      Pair* ds_head = ds_pairs + g * query_pairs * pad.keys;
      // Row blocks of queries: d probs, d scores, then dq.
      for (int64_t i0 = 0; i0 < pad.queries; i0 += pad.block) {
        times_keys(dy, v_t, s, pad, op.causal, i0, dp);
        for (int64_t r = 0; r < pad.block; r += 2) {
          const int64_t i = i0 + r;
          const auto keys = [&](int64_t query) {
            return query < s.queries ? keys_of_query(s, op.causal, query) : 0;
          };
          softmax_backward_pair(dp + r * pad.keys, dp + (r + 1) * pad.keys,
                                p_head + i / 2 * pad.keys, keys(i), keys(i + 1), op.scale,
                                ds + r * pad.keys, ds + (r + 1) * pad.keys,
                                ds_head + i / 2 * pad.keys, pad.keys);
        }
        product({reinterpret_cast<const Pair*>(ds), pad.keys / 2, k_pairs, pad.dim, 0,
                 key_pairs_weighed(s, pad, op.causal, i0), pad.dim / kLanes, out, pad.dim},
                s);
        store_block(out, pad.dim, op.dq, b, h, i0, pad.block);
      }
    }
    // Columns of keys: dv^T = dy^T P and dk^T = q^T dS over the stacked queries (with one query
    // head per key head, only over the queries that see the keys).
    for (int64_t j0 = 0; j0 < s.keys; j0 += kLanes) {
      const int64_t first = op.causal && groups == 1 ? j0 / 2 : 0;  // the first query that sees j0
      column_product(
          {dy_t, stacked_pairs, p_stack + j0, pad.keys, first, stacked_pairs, 1, out, kLanes},
          pad.dim, s);
      store_columns(out, pad, op.dv, b, kv, j0, columns);
      column_product(
          {q_t, stacked_pairs, ds_pairs + j0, pad.keys, first, stacked_pairs, 1, out, kLanes},
          pad.dim, s);
      store_columns(out, pad, op.dk, b, kv, j0, columns);
    }
  }
}

#endif  // BB_BF16_ATTENTION

}  // namespace

Tensor bf16_attention_forward(const Bf16AttentionInputs& inputs, const Tensor& y) {
  const Shape s = checked_shape(inputs);
  check_operand(y, "y", s.batch, s.heads, s.queries, s.head_dim);
  const Padded pad(s);
  Tensor probs = torch::empty({s.batch, s.heads, pad.queries / 2, pad.keys, 2},
                              inputs.q.options());  // (B, H, Tp/2, Sp, 2)
#if BB_BF16_ATTENTION
  const std::vector<float> biases = key_biases(inputs.mask, s, pad.keys);
  const ForwardOperands op{Heads(inputs.q),
                           Heads(inputs.k),
                           Heads(inputs.v),
                           Heads(y),
                           reinterpret_cast<Pair*>(probs.data_ptr<at::BFloat16>()),
                           biases.data(),
                           inputs.mask.causal,
                           float(inputs.scale)};
  at::parallel_for(0, s.batch * s.key_heads, 1,
                   [&](int64_t begin, int64_t end) { forward_heads(op, s, begin, end); });
#endif
  return probs;
}

Tensor bf16_attention_probabilities(const Tensor& pairs, int64_t queries, int64_t keys) {
  BB_CHECK(
      pairs.dim() == 5 && pairs.size(4) == 2 && 2 * pairs.size(2) >= queries &&
          pairs.size(3) >= keys,
      "bf16 attention: the probabilities' pairs of rows must be (B, H, Tp/2, Sp, 2) with Tp >= ",
      queries, " and Sp >= ", keys, ", got ", pairs.sizes());
  const int64_t batch = pairs.size(0), heads = pairs.size(1);
  return pairs.transpose(3, 4)
      .reshape({batch, heads, 2 * pairs.size(2), pairs.size(3)})
      .slice(2, 0, queries)
      .slice(3, 0, keys);  // (B, H, T, S)
}

void bf16_attention_backward(const Bf16AttentionInputs& inputs, const Tensor& probs,
                             const Tensor& dy, const Bf16AttentionGradients& gradients) {
  const Shape s = checked_shape(inputs);
  check_operand(dy, "dy", s.batch, s.heads, s.queries, s.head_dim);
  check_operand(gradients.dq, "dq", s.batch, s.heads, s.queries, s.head_dim);
  check_operand(gradients.dk, "dk", s.batch, s.key_heads, s.keys, s.head_dim);
  check_operand(gradients.dv, "dv", s.batch, s.key_heads, s.keys, s.head_dim);
  const Padded pad(s);
  BB_CHECK(
      probs.defined() && probs.scalar_type() == torch::kBFloat16 && probs.is_contiguous() &&
          probs.sizes() == torch::IntArrayRef({s.batch, s.heads, pad.queries / 2, pad.keys, 2}),
      "bf16 attention: probs must be what forward returned, contiguous bfloat16 of shape (",
      s.batch, ", ", s.heads, ", ", pad.queries / 2, ", ", pad.keys, ", 2), got ",
      probs.defined() ? cat(probs.toString(), " of shape ", probs.sizes(),
                            probs.is_contiguous() ? "" : ", not contiguous")
                      : std::string("an undefined tensor"));
#if BB_BF16_ATTENTION
  const BackwardOperands op{
      Heads(inputs.q),     Heads(inputs.k),
      Heads(inputs.v),     Heads(dy),
      Heads(gradients.dq), Heads(gradients.dk),
      Heads(gradients.dv), reinterpret_cast<const Pair*>(probs.data_ptr<at::BFloat16>()),
      inputs.mask.causal,  float(inputs.scale)};
  at::parallel_for(0, s.batch * s.key_heads, 1,
                   [&](int64_t begin, int64_t end) { backward_heads(op, s, begin, end); });
#endif
}

}  // namespace bigbatch::nn
