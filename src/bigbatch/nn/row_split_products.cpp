#include "bigbatch/nn/row_split_products.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "bigbatch/core/check.h"

namespace bigbatch::nn {
namespace {

std::atomic<RowSplit> process_choice{RowSplit::kAuto};

/// Parts are whole blocks of this many rows (AMX tiles hold 16), so that no part starts inside a
/// block the unsplit product computes together.
constexpr int64_t kRowAlignment = 32;
/// A split is kept where it took at most this share of the unsplit product's time.
constexpr double kKeepBelow = 0.9;
/// Shapes tried at most; later new shapes run unsplit. Rows that change from product to product
/// (a BERT's micro-batches without their padding) would otherwise try every product.
constexpr int64_t kMostTrials = 64;

/// What a product's choice depends on besides its values: n, k, m, b row-major, what it adds
/// (Addend), threads.
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, bool, int, int>;

/// What a product adds to a @ b.
enum Addend : int { kNothing = 0, kResult = 1, kBias = 2 };

/// One product to compute and what it adds.
struct Product {
  Addend addend = kNothing;
  const torch::Tensor* bias = nullptr;  ///< (m), for kBias
  /// The unsplit product into the whole result, as the caller computes it without a split.
  std::function<void(const torch::Tensor& result)> whole;
};

struct Trials {
  std::mutex mutex;
  std::map<ShapeKey, bool> split;  // kept or not, per shape tried
  RowSplitCounts counts;
};

Trials& trials() {
  static Trials instance;
  return instance;
}

/// Rows of the product into `out`: rows @ b, + out (kResult) or + bias (kBias).
void part_product(const torch::Tensor& out, const torch::Tensor& rows, const torch::Tensor& b,
                  const Product& product) {
  torch::Tensor into = out;
  if (product.addend == kResult)
    into.addmm_(rows, b);
  else if (product.addend == kBias)
    at::addmm_out(into, *product.bias, rows, b);
  else
    at::mm_out(into, rows, b);
}

/// The product with a's rows in at::get_num_threads() parts of whole kRowAlignment blocks, each
/// a one-thread product (nested in the parallel region, oneDNN runs on the calling thread).
void split_product(const torch::Tensor& result, const torch::Tensor& a, const torch::Tensor& b,
                   const Product& product) {
  const int64_t rows = a.size(0);
  const int64_t parts = at::get_num_threads();
  const int64_t blocks = (rows + kRowAlignment - 1) / kRowAlignment;
  const int64_t per_part = (blocks + parts - 1) / parts * kRowAlignment;
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      const int64_t first = part * per_part;
      const int64_t count = std::min(per_part, rows - first);
      if (count > 0)
        part_product(result.narrow(0, first, count), a.narrow(0, first, count), b, product);
    }
  });
}

double seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Times both ways into `result` (left as the unsplit product) and a scratch copy; whether the
/// split was faster and bitwise the same.
bool try_split(const torch::Tensor& result, const torch::Tensor& a, const torch::Tensor& b,
               const Product& product) {
  const bool adds_result = product.addend == kResult;
  const torch::Tensor before = adds_result ? result.clone() : torch::Tensor();
  const torch::Tensor scratch = at::empty_like(result);
  const auto unsplit = [&] {
    if (adds_result)
      result.copy_(before);
    product.whole(result);
  };
  const auto split = [&] {
    if (adds_result)
      scratch.copy_(before);
    split_product(scratch, a, b, product);
  };
  split();  // the first call of each way builds oneDNN's kernels for its shape
  unsplit();
  std::array<double, 2> fastest = {1e30, 1e30};  // split, unsplit
  for (int round = 0; round < 3; ++round) {
    fastest[0] = std::min(fastest[0], seconds(split));
    fastest[1] = std::min(fastest[1], seconds(unsplit));
  }
  return fastest[0] <= kKeepBelow * fastest[1] && torch::equal(scratch, result);
}

bool bf16_cpu_matrix(const torch::Tensor& t) {
  return t.defined() && t.dim() == 2 && t.device().is_cpu() && t.layout() == torch::kStrided &&
         t.scalar_type() == torch::kBFloat16;
}

/// split_product_into and split_product_with_bias_into, `product` saying what is added.
bool split_into(const torch::Tensor& result, const torch::Tensor& a, const torch::Tensor& b,
                const Product& product) {
  if (!row_split_operands(a, b) || !bf16_cpu_matrix(result) || !result.is_contiguous() ||
      result.size(0) != a.size(0) || result.size(1) != b.size(1))
    return false;
  if (row_split() == RowSplit::kAlways) {
    split_product(result, a, b, product);
    return true;
  }
  const ShapeKey key{a.size(0),         a.size(1),      b.size(1),
                     b.is_contiguous(), product.addend, at::get_num_threads()};
  Trials& all = trials();
  std::optional<bool> known;
  {
    const std::lock_guard<std::mutex> lock(all.mutex);
    const auto found = all.split.find(key);
    if (found != all.split.end())
      known = found->second;
    else if (all.counts.tried >= kMostTrials)
      known = false;
  }
  if (known) {
    if (!*known)
      return false;
    split_product(result, a, b, product);
    return true;
  }
  const bool keep = try_split(result, a, b, product);  // `result` holds the unsplit product
  const std::lock_guard<std::mutex> lock(all.mutex);
  if (all.split.emplace(key, keep).second) {
    ++all.counts.tried;
    all.counts.split += keep ? 1 : 0;
  }
  return true;
}

}  // namespace

RowSplit parse_row_split(const std::string& text, const std::string& field) {
  if (text == "auto")
    return RowSplit::kAuto;
  if (text == "never")
    return RowSplit::kNever;
  if (text == "always")
    return RowSplit::kAlways;
  throw InputError(cat(field, " must be \"auto\", \"never\" or \"always\", got \"", text, "\""));
}

std::string to_string(RowSplit mode) {
  switch (mode) {
    case RowSplit::kAuto:
      return "auto";
    case RowSplit::kNever:
      return "never";
    case RowSplit::kAlways:
      return "always";
  }
  return "?";
}

void set_row_split(RowSplit mode) {
  process_choice.store(mode);
}

RowSplit row_split() {
  return process_choice.load();
}

bool row_split_operands(const torch::Tensor& a, const torch::Tensor& b) {
  return row_split() != RowSplit::kNever && bf16_cpu_matrix(a) && bf16_cpu_matrix(b) &&
         a.stride(1) == 1 && a.size(1) == b.size(0) && a.size(0) >= 2 * kRowAlignment &&
         at::get_num_threads() > 1 && !at::in_parallel_region();
}

bool split_product_into(const torch::Tensor& result, const torch::Tensor& a, const torch::Tensor& b,
                        bool accumulate) {
  Product product;
  product.addend = accumulate ? kResult : kNothing;
  product.whole = [&](const torch::Tensor& into) { part_product(into, a, b, product); };
  return split_into(result, a, b, product);
}

bool split_product_with_bias_into(const torch::Tensor& result, const torch::Tensor& bias,
                                  const torch::Tensor& a, const torch::Tensor& b,
                                  const std::function<torch::Tensor()>& unsplit) {
  const bool bias_fits = bias.defined() && bias.dim() == 1 && bias.device().is_cpu() &&
                         bias.scalar_type() == torch::kBFloat16 && bias.is_contiguous() &&
                         b.dim() == 2 && bias.size(0) == b.size(1);
  if (!bias_fits)
    return false;
  Product product;
  product.addend = kBias;
  product.bias = &bias;
  product.whole = [&](const torch::Tensor& into) { into.copy_(unsplit()); };
  return split_into(result, a, b, product);
}

RowSplitCounts row_split_counts() {
  Trials& all = trials();
  const std::lock_guard<std::mutex> lock(all.mutex);
  return all.counts;
}

}  // namespace bigbatch::nn
