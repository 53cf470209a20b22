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
#include "bigbatch/nn/fp32_matmul.h"

namespace bigbatch::nn {
namespace {

std::atomic<RowSplit> process_choice{RowSplit::kAuto};

/// Parts are whole blocks of this many rows (AMX tiles hold 16), so that no part starts inside a
/// block the unsplit product computes together.
constexpr int64_t kRowAlignment = 32;
/// A split is kept where it took at most this share of the unsplit product's time.
constexpr double kKeepBelow = 0.9;
/// Products side by side are kept where they took at most this share of the time one after
/// another took (the 30M Llama's groups measured 0.78-0.92 in their trials).
constexpr double kKeepSideBySideBelow = 0.95;
/// Shapes tried at most; later new shapes run unsplit. Rows that change from product to product
/// (a BERT's micro-batches without their padding) would otherwise try every product.
constexpr int64_t kMostTrials = 64;

/// What a product's choice depends on besides its values: n, k, m, b row-major, what it adds
/// (Addend), threads.
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, bool, int, int>;

/// What a group of gemms_side_by_side's choice depends on besides its values: each product's n,
/// k, m and whether a and b are row-major; the threads.
using GroupKey = std::pair<std::vector<std::array<int64_t, 5>>, int>;

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
  std::map<ShapeKey, bool> split;         // kept or not, per shape tried
  std::map<GroupKey, bool> side_by_side;  // kept or not, per group tried
  RowSplitCounts counts;
};

Trials& trials() {
  static Trials instance;
  return instance;
}

/// The choice a trial made for `key`; false for a new key once `tried` reached kMostTrials;
/// nothing for a new key to try.
template <typename Key>
std::optional<bool> known_choice(const std::map<Key, bool>& choices, const Key& key,
                                 const int64_t& tried) {
  const std::lock_guard<std::mutex> lock(trials().mutex);
  const auto found = choices.find(key);
  if (found != choices.end())
    return found->second;
  if (tried >= kMostTrials)
    return false;
  return std::nullopt;
}

/// Records a trial's choice for `key` and counts it (`tried`, and `kept` where kept), unless
/// another thread's trial of the same key came first.
template <typename Key>
void remember_choice(std::map<Key, bool>& choices, const Key& key, bool keep, int64_t& tried,
                     int64_t& kept) {
  const std::lock_guard<std::mutex> lock(trials().mutex);
  if (choices.emplace(key, keep).second) {
    ++tried;
    kept += keep ? 1 : 0;
  }
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

/// The fastest of `rounds` timings of each way, after one untimed call of each (which builds
/// oneDNN's kernels for its shapes): {first's, second's} in seconds.
std::array<double, 2> fastest_times(const std::function<void()>& first,
                                    const std::function<void()>& second, int rounds) {
  first();
  second();
  std::array<double, 2> fastest = {1e30, 1e30};
  for (int round = 0; round < rounds; ++round) {
    fastest[0] = std::min(fastest[0], seconds(first));
    fastest[1] = std::min(fastest[1], seconds(second));
  }
  return fastest;
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
  const std::array<double, 2> fastest = fastest_times(split, unsplit, 3);
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
  if (const std::optional<bool> known = known_choice(all.split, key, all.counts.tried)) {
    if (!*known)
      return false;
    split_product(result, a, b, product);
    return true;
  }
  const bool keep = try_split(result, a, b, product);  // `result` holds the unsplit product
  remember_choice(all.split, key, keep, all.counts.tried, all.counts.split);
  return true;
}

bool unit_stride(const torch::Tensor& t) {
  return t.stride(1) == 1 || t.stride(0) == 1;
}

/// Whether gemms_side_by_side may run `products` side by side (its conditions).
bool side_by_side_operands(const std::vector<ProductOperands>& products) {
  if (products.size() < 2 || row_split() == RowSplit::kNever || at::get_num_threads() < 2 ||
      at::in_parallel_region())
    return false;
  return std::all_of(products.begin(), products.end(), [](const ProductOperands& p) {
    return bf16_cpu_matrix(p.first) && bf16_cpu_matrix(p.second) &&
           p.first.size(1) == p.second.size(0) && unit_stride(p.first) && unit_stride(p.second);
  });
}

/// Each thread's products: the largest (in multiply-adds) first, each to the least loaded thread.
std::vector<std::vector<size_t>> thread_shares(const std::vector<ProductOperands>& products,
                                               int threads) {
  std::vector<size_t> order(products.size());
  std::vector<int64_t> size(products.size());
  for (size_t j = 0; j < products.size(); ++j) {
    order[j] = j;
    size[j] = products[j].first.size(0) * products[j].first.size(1) * products[j].second.size(1);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return size[x] > size[y]; });
  std::vector<std::vector<size_t>> shares(static_cast<size_t>(threads));
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (const size_t j : order) {
    const auto least =
        static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    shares[least].push_back(j);
    load[least] += size[j];
  }
  return shares;
}

/// The products into `results`, side by side: each thread its share, each a one-thread product
/// (nested in the parallel region, oneDNN runs on the calling thread).
void run_side_by_side(const std::vector<ProductOperands>& products,
                      const std::vector<torch::Tensor>& results) {
  const int threads = at::get_num_threads();
  const std::vector<std::vector<size_t>> shares = thread_shares(products, threads);
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // worker threads: no autograd
    for (int64_t thread = begin; thread < end; ++thread) {
      for (const size_t j : shares[static_cast<size_t>(thread)]) {
        torch::Tensor into = results[j];
        at::mm_out(into, products[j].first, products[j].second);
      }
    }
  });
}

/// An uninitialised result (n, m) for each product a (n, k) @ b (k, m).
std::vector<torch::Tensor> empty_results(const std::vector<ProductOperands>& products) {
  std::vector<torch::Tensor> results;
  for (const ProductOperands& p : products)
    results.push_back(at::empty({p.first.size(0), p.second.size(1)}, p.first.options()));
  return results;
}

std::vector<torch::Tensor> one_after_another(const std::vector<ProductOperands>& products) {
  std::vector<torch::Tensor> results;
  for (const ProductOperands& p : products)
    results.push_back(gemm(p.first, p.second));
  return results;
}

/// Times both ways; whether side by side was faster and each result bitwise gemm's. `results`
/// become gemm's.
bool try_side_by_side(const std::vector<ProductOperands>& products,
                      std::vector<torch::Tensor>& results) {
  const std::vector<torch::Tensor> scratch = empty_results(products);
  const auto side_by_side = [&] { run_side_by_side(products, scratch); };
  const auto sequential = [&] { results = one_after_another(products); };
  const std::array<double, 2> fastest = fastest_times(side_by_side, sequential, 5);
  if (fastest[0] > kKeepSideBySideBelow * fastest[1])
    return false;
  for (size_t j = 0; j < results.size(); ++j) {
    if (!torch::equal(scratch[j], results[j]))
      return false;
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

std::vector<torch::Tensor> gemms_side_by_side(const std::vector<ProductOperands>& products) {
  if (!side_by_side_operands(products))
    return one_after_another(products);
  const auto side_by_side = [&products] {
    std::vector<torch::Tensor> results = empty_results(products);  // (n, m) each
    run_side_by_side(products, results);
    return results;
  };
  if (row_split() == RowSplit::kAlways)
    return side_by_side();
  GroupKey key{{}, at::get_num_threads()};
  for (const auto& [a, b] : products)
    key.first.push_back({a.size(0), a.size(1), b.size(1), a.stride(1) == 1, b.stride(1) == 1});
  Trials& all = trials();
  if (const std::optional<bool> known =
          known_choice(all.side_by_side, key, all.counts.groups_tried))
    return *known ? side_by_side() : one_after_another(products);
  std::vector<torch::Tensor> results;
  const bool keep = try_side_by_side(products, results);  // `results` hold gemm's
  remember_choice(all.side_by_side, key, keep, all.counts.groups_tried,
                  all.counts.groups_side_by_side);
  return results;
}

RowSplitCounts row_split_counts() {
  Trials& all = trials();
  const std::lock_guard<std::mutex> lock(all.mutex);
  return all.counts;
}

std::string describe(const RowSplitCounts& counts) {
  if (counts.tried == 0 && counts.groups_tried == 0)
    return "";
  return cat("bf16 products (model.row_split = \"auto\"): ", counts.tried, " shapes timed, ",
             counts.split, " split by rows; ", counts.groups_tried, " groups timed, ",
             counts.groups_side_by_side, " side by side");
}

}  // namespace bigbatch::nn
