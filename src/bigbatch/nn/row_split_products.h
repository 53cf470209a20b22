// bf16 matrix products split by rows over the OpenMP threads, where oneDNN would run them on one.
//
// On 2 threads oneDNN's AMX matmul (LibTorch 2.15) runs some mid-sized products on one thread:
// (1024 x 576) @ (576 x 576) and (1024 x 1536) @ (1536 x 576), the 30M Llama's q, o and down
// projections and its gate and up input gradients, took as long on 2 threads as on 1, while
// (1024 x 576) @ (576 x 1536) ran 2.1-2.2x faster on 2. Splitting the rows of the first operand
// in one part per thread, each part a one-thread product of its own, ran those 1.1-1.6x faster
// and gave the same bits (docs/BENCHMARKS.md). Which shapes oneDNN runs on one thread depends on
// its version and the CPU, so the split is chosen per shape by trying both at the shape's first
// product: it is kept only where it was faster and its result bitwise the unsplit one's, so the
// choice never changes a result.
//
// Independent products (a Llama's q, k and v of one input, or gate and up; in backward their
// input and weight gradients, and any bf16 Linear's two) can instead run side by side, each a
// one-thread product on a thread of its own (gemms_side_by_side): oneDNN ran some of them, the
// weight gradients' transposed-view products among them, at only 1.3-1.6x their one-thread rate on
// 2 threads. The same rule decides: per group of shapes, kept only where faster and bitwise the
// same.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch::nn {

/// When gemm(), gemm_into() and gemm_bias() (nn/fp32_matmul) split a bf16 product by rows.
enum class RowSplit {
  kAuto,    ///< where the shape's first product found it faster and bitwise the same
  kNever,   ///< never: oneDNN's own threading
  kAlways,  ///< wherever it can (tests, measurements)
};

/// Reads "auto" | "never" | "always"; anything else throws InputError naming `field` and `text`.
RowSplit parse_row_split(const std::string& text, const std::string& field);
/// The config spelling: "auto", "never" or "always".
std::string to_string(RowSplit mode);

/// Sets the process-wide choice (default kAuto). Safe from any thread.
void set_row_split(RowSplit mode);
/// The process-wide choice.
RowSplit row_split();

/// Whether split_product_into() can take a product of these operands (into a contiguous bf16
/// result): `a` (n, k) and `b` (k, m) bf16 CPU matrices, a's rows contiguous (stride 1 along k), n
/// at least 64 rows, row_split() not kNever, more than one OpenMP thread and outside a parallel
/// region.
bool row_split_operands(const torch::Tensor& a, const torch::Tensor& b);

/// result = a @ b (+ result where `accumulate`) with a's rows in one part per OpenMP thread,
/// where row_split_operands(), `result` is a contiguous bf16 (n, m) and row_split() and the
/// shape's trial say so. Returns whether it computed the product; false
/// leaves `result` untouched for the caller's own product. At a shape's first product under
/// kAuto it times both ways (the result is the unsplit product) and remembers the choice; after 64
/// shapes tried, new shapes run unsplit.
/// a (n, k), b (k, m), result (n, m)
bool split_product_into(const torch::Tensor& result, const torch::Tensor& a, const torch::Tensor& b,
                        bool accumulate);

/// result = bias + a @ b (the bias broadcast over the rows) with a's rows in one part per OpenMP
/// thread, each part at::addmm_out, as split_product_into decides; the unsplit product, for the
/// trial, is `unsplit()` (the caller's own, for example oneDNN's linear with the bias inside).
/// bias (m) bf16 contiguous, a (n, k), b (k, m), result (n, m)
bool split_product_with_bias_into(const torch::Tensor& result, const torch::Tensor& bias,
                                  const torch::Tensor& a, const torch::Tensor& b,
                                  const std::function<torch::Tensor()>& unsplit);

/// One product a @ b of gemms_side_by_side: a (n, k), b (k, m).
using ProductOperands = std::pair<torch::Tensor, torch::Tensor>;

/// a_j @ b_j for each product, each result what gemm(a_j, b_j) (nn/fp32_matmul) gives. Where
/// every pair is two bf16 CPU matrices with a unit stride each, there are at least two, row_split()
/// is not kNever, more than one OpenMP thread and outside a parallel region, they may run side by
/// side: each a one-thread product on one of the threads, the threads given about equal shares of
/// multiply-adds (the largest product first to the least loaded). Under kAuto the group's first
/// run (its shapes and layouts) times both ways and keeps side by side only where faster and each
/// result bitwise gemm's; after 64 groups tried, new groups run one after another. kAlways runs
/// every such group side by side. Elsewhere one after another, each gemm().
/// products (a_j (n_j, k_j), b_j (k_j, m_j)) -> results (n_j, m_j)
std::vector<torch::Tensor> gemms_side_by_side(const std::vector<ProductOperands>& products);

/// How many shapes have been tried so far, and in how many of them the split was kept; how many
/// groups of gemms_side_by_side were tried, and in how many running side by side was kept.
struct RowSplitCounts {
  int64_t tried = 0;
  int64_t split = 0;
  int64_t groups_tried = 0;
  int64_t groups_side_by_side = 0;
};
/// The trials of this process so far (row splits and groups side by side).
RowSplitCounts row_split_counts();

/// What `counts` says in one line for a run's output, "bf16 products (model.row_split = "auto"):
/// 12 shapes timed, 4 split by rows; 6 groups timed, 5 side by side"; empty where nothing was
/// tried (no bf16 products on the kernels, or row_split "always" or "never").
std::string describe(const RowSplitCounts& counts);

}  // namespace bigbatch::nn
