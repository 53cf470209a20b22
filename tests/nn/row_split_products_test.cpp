// nn/row_split_products: bf16 products split by rows over the threads: within rounding of the
// unsplit product where forced, bitwise it under auto (nn::gemm and nn::gemm_into, which try each
// shape once), and left to the caller where they cannot be split. Independent products side by
// side (gemms_side_by_side): within rounding where forced, bitwise gemm's under auto (each group
// tried once), one after another where they cannot run side by side.
#include "bigbatch/nn/row_split_products.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "scoped_setting.h"

namespace bigbatch::nn {
namespace {

using testing::ScopedSetting;
using torch::Tensor;

/// Two OpenMP threads and `mode` for one test.
struct Settings {
  explicit Settings(RowSplit mode)
      : threads(at::get_num_threads, at::set_num_threads, 2),
        split(row_split, set_row_split, mode) {}
  ScopedSetting<int> threads;
  ScopedSetting<RowSplit> split;
};

Tensor bf16(std::initializer_list<int64_t> sizes) {
  return torch::randn(sizes).to(torch::kBFloat16);
}

TEST(RowSplitProducts, AlwaysSplitsTheRowsOnePartPerThreadWithinRounding) {
  const Settings settings(RowSplit::kAlways);
  torch::manual_seed(3);
  // 200 rows: parts of 128 and 72 (whole blocks of 32 rows, the last one short).
  const Tensor a = bf16({200, 96});                               // (n, k)
  for (const Tensor& b : {bf16({96, 80}), bf16({80, 96}).t()}) {  // (k, m), row- or column-major
    const Tensor plain = at::mm(a, b);                            // (n, m)
    const Tensor split = at::empty_like(plain);
    ASSERT_TRUE(split_product_into(split, a, b, /*accumulate=*/false));
    EXPECT_TRUE(torch::allclose(split.to(torch::kFloat), plain.to(torch::kFloat), 1e-2, 1e-2));
    const Tensor base = bf16({200, 80});
    const Tensor sum = base.clone();
    ASSERT_TRUE(split_product_into(sum, a, b, /*accumulate=*/true));
    EXPECT_TRUE(
        torch::allclose(sum.to(torch::kFloat), base.addmm(a, b).to(torch::kFloat), 1e-2, 2e-2));
    EXPECT_TRUE(torch::equal(gemm(a, b), split));  // gemm() takes the same path
  }
}

TEST(RowSplitProducts, CountsAreDescribedInOneLineOnlyWhereSomethingWasTried) {
  EXPECT_EQ(describe(RowSplitCounts{}), "");
  EXPECT_EQ(describe(RowSplitCounts{12, 4, 6, 5}),
            "bf16 products (model.row_split = \"auto\"): 12 shapes timed, 4 split by rows; 6 "
            "groups timed, 5 side by side");
  EXPECT_NE(describe(RowSplitCounts{0, 0, 1, 0}), "");  // a group alone
}

TEST(RowSplitProducts, AutoTriesEachShapeOnceAndGivesTheUnsplitBits) {
  const Settings settings(RowSplit::kAuto);
  torch::manual_seed(4);
  const Tensor b = bf16({72, 40}).t();  // (72, 40) transposed: (k, m) = (40, 72)
  const RowSplitCounts before = row_split_counts();
  for (int call = 0; call < 3; ++call) {  // the first call tries; the others use its choice
    const Tensor a = bf16({168, 40});     // (n, k): a shape no other test uses
    EXPECT_TRUE(torch::equal(gemm(a, b), at::mm(a, b))) << "call " << call;
    const Tensor base = bf16({168, 72});
    const Tensor sum = base.clone();
    gemm_into(sum, a, b, /*accumulate=*/true);
    EXPECT_TRUE(torch::equal(sum, base.addmm(a, b))) << "call " << call;
  }
  const RowSplitCounts after = row_split_counts();
  EXPECT_EQ(after.tried - before.tried, 2);  // the product and the product added to a result
  EXPECT_LE(after.split - before.split, 2);
}

TEST(RowSplitProducts, BiasProductsSplitWithinRoundingAndBitwiseUnderAuto) {
  torch::manual_seed(5);
  const Tensor a = bf16({232, 48});                    // (n, k): a shape no other test uses
  const Tensor w = bf16({56, 48}), bias = bf16({56});  // (m, k), (m)
  Tensor unsplit;                                      // (n, m)
  {
    const Settings never(RowSplit::kNever);
    unsplit = gemm_bias(bias, a, w.t());
  }
  {
    const Settings always(RowSplit::kAlways);
    const Tensor split = at::empty({232, 56}, a.options());
    ASSERT_TRUE(split_product_with_bias_into(split, bias, a, w.t(), [&] { return unsplit; }));
    EXPECT_TRUE(torch::allclose(split.to(torch::kFloat), unsplit.to(torch::kFloat), 1e-2, 2e-2));
    EXPECT_FALSE(split_product_with_bias_into(split, bias.to(torch::kFloat), a, w.t(),
                                              [&] { return unsplit; }));  // a float32 bias
  }
  const Settings automatic(RowSplit::kAuto);
  const RowSplitCounts before = row_split_counts();
  for (int call = 0; call < 3; ++call)
    EXPECT_TRUE(torch::equal(gemm_bias(bias, a, w.t()), unsplit)) << "call " << call;
#if TORCH_VERSION_MAJOR >= 2  // where gemm_bias puts a bf16 bias inside oneDNN's linear
  EXPECT_EQ(row_split_counts().tried - before.tried, 1);
#endif
}

TEST(RowSplitProducts, WhatCannotBeSplitIsLeftToTheCaller) {
  const Settings settings(RowSplit::kAlways);
  const Tensor a = bf16({128, 32}), b = bf16({32, 16});  // (n, k), (k, m)
  const Tensor result = torch::full({128, 16}, 7.0).to(torch::kBFloat16);
  const auto refused = [&](const Tensor& into, const Tensor& left, const Tensor& right) {
    return !split_product_into(into, left, right, false) && (result == 7).all().item<bool>();
  };
  EXPECT_TRUE(row_split_operands(a, b));
  EXPECT_TRUE(refused(result, a.to(torch::kFloat), b));                  // float32
  EXPECT_TRUE(refused(result, bf16({32, 128}).t(), b));                  // a's rows strided
  EXPECT_TRUE(refused(result.narrow(0, 0, 63), a.narrow(0, 0, 63), b));  // under 64 rows
  EXPECT_TRUE(refused(result, a, bf16({32, 17})));                       // result of another shape
  EXPECT_TRUE(refused(bf16({16, 128}).t(), a, b));                       // result not contiguous
  {
    const ScopedSetting<int> one(at::get_num_threads, at::set_num_threads, 1);
    EXPECT_TRUE(refused(result, a, b));
  }
  set_row_split(RowSplit::kNever);
  EXPECT_TRUE(refused(result, a, b));
}

/// Three independent products in the layouts of a Llama's q, k and v gradients: a weight
/// gradient's transposed view of the output gradient, an input gradient, a forward product's
/// transposed weight. Shapes no other test uses, offset by `extra` rows.
std::vector<ProductOperands> three_products(int64_t extra) {
  return {{bf16({96 + extra, 40}).t(), bf16({96 + extra, 56})},
          {bf16({24 + extra, 40}), bf16({40, 8})},
          {bf16({40 + extra, 24}), bf16({56, 24}).t()}};
}

TEST(GemmsSideBySide, AlwaysRunsEachProductOnOneThreadWithinRounding) {
  const Settings settings(RowSplit::kAlways);
  torch::manual_seed(6);
  const std::vector<ProductOperands> products = three_products(0);
  const RowSplitCounts before = row_split_counts();
  const std::vector<Tensor> results = gemms_side_by_side(products);
  ASSERT_EQ(results.size(), 3u);
  for (size_t j = 0; j < results.size(); ++j) {
    const Tensor plain = at::mm(products[j].first, products[j].second);  // (n, m)
    ASSERT_EQ(results[j].sizes(), plain.sizes()) << "product " << j;
    EXPECT_TRUE(torch::allclose(results[j].to(torch::kFloat), plain.to(torch::kFloat), 1e-2, 1e-2))
        << "product " << j;
  }
  EXPECT_EQ(row_split_counts().groups_tried, before.groups_tried);  // always: nothing to try
}

TEST(GemmsSideBySide, AutoTriesEachGroupOnceAndGivesGemmsBits) {
  const Settings settings(RowSplit::kAuto);
  torch::manual_seed(7);
  const RowSplitCounts before = row_split_counts();
  for (int call = 0; call < 3; ++call) {  // the first call tries; the others use its choice
    const std::vector<ProductOperands> products = three_products(8);
    const std::vector<Tensor> results = gemms_side_by_side(products);
    ASSERT_EQ(results.size(), 3u);
    for (size_t j = 0; j < results.size(); ++j) {
      EXPECT_TRUE(torch::equal(results[j], gemm(products[j].first, products[j].second)))
          << "call " << call << ", product " << j;
    }
  }
  const RowSplitCounts after = row_split_counts();
  EXPECT_EQ(after.groups_tried - before.groups_tried, 1);
  EXPECT_LE(after.groups_side_by_side - before.groups_side_by_side, 1);
}

TEST(GemmsSideBySide, RunOneAfterAnotherWhereTheyCannotRunSideBySide) {
  const Settings settings(RowSplit::kAuto);
  torch::manual_seed(8);
  const RowSplitCounts before = row_split_counts();
  const auto one_after_another = [](const std::vector<ProductOperands>& products) {
    const std::vector<Tensor> results = gemms_side_by_side(products);
    bool same = results.size() == products.size();
    for (size_t j = 0; same && j < results.size(); ++j)
      same = torch::equal(results[j], gemm(products[j].first, products[j].second));
    return same;
  };
  EXPECT_TRUE(one_after_another({{bf16({24, 40}), bf16({40, 8})}}));  // one product
  std::vector<ProductOperands> float32 = three_products(24);
  float32[1].first = float32[1].first.to(torch::kFloat);
  float32[1].second = float32[1].second.to(torch::kFloat);
  EXPECT_TRUE(one_after_another(float32));                   // a float32 product
  const Tensor strided = bf16({24, 80}).slice(1, 0, 80, 2);  // (24, 40), strides (80, 2)
  EXPECT_TRUE(one_after_another({{strided, bf16({40, 8})}, {bf16({16, 40}), bf16({40, 8})}}));
  {
    const ScopedSetting<int> one(at::get_num_threads, at::set_num_threads, 1);
    EXPECT_TRUE(one_after_another(three_products(40)));
  }
  set_row_split(RowSplit::kNever);
  EXPECT_TRUE(one_after_another(three_products(48)));
  EXPECT_EQ(row_split_counts().groups_tried, before.groups_tried);
}

TEST(RowSplitProducts, ConfigSpellings) {
  for (const RowSplit mode : {RowSplit::kAuto, RowSplit::kNever, RowSplit::kAlways})
    EXPECT_EQ(parse_row_split(to_string(mode), "model.row_split"), mode);
  try {
    parse_row_split("rows", "model.row_split");
    FAIL() << "no throw";
  } catch (const bigbatch::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "model.row_split must be \"auto\", \"never\" or \"always\", got \"rows\"");
  }
}

}  // namespace
}  // namespace bigbatch::nn
