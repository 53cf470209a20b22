// nn::PackedTokens: where the real tokens of right-, left- and hole-padded rows go, packed and in
// compact rows, the round trip of a tensor through them, fillers up to a multiple of rows, the
// masks refused, and scatter_rows, bitwise index_copy's rows.
#include "bigbatch/nn/packed_tokens.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace bigbatch::nn {
namespace {

torch::Tensor longs(std::vector<int64_t> values) {
  return torch::tensor(values, torch::kLong);
}

TEST(PackedTokens, RealTokensOfEveryPaddingPatternAreFoundAndPlacedFirstInCompactRows) {
  // Right padding, left padding, a hole, no padding.
  const torch::Tensor mask = torch::tensor({1, 1, 1, 0, 0,  //
                                            0, 0, 1, 1, 0,  //
                                            1, 0, 1, 0, 1,  //
                                            1, 1, 1, 1, 1},
                                           torch::kLong)
                                 .view({4, 5});
  const PackedTokens p = pack_tokens(mask);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.time, 5);
  EXPECT_EQ(p.longest, 5);
  EXPECT_TRUE(torch::equal(p.real, longs({0, 1, 2, 7, 8, 10, 12, 14, 15, 16, 17, 18, 19})));
  EXPECT_TRUE(torch::equal(p.positions, longs({0, 1, 2, 2, 3, 0, 2, 4, 0, 1, 2, 3, 4})));
  EXPECT_TRUE(torch::equal(p.slots, longs({0, 1, 2, 5, 6, 10, 11, 12, 15, 16, 17, 18, 19})));
  EXPECT_TRUE(torch::equal(p.first, longs({0, 3, 5, 8})));
  EXPECT_TRUE(torch::equal(p.padding.to(torch::kLong), torch::tensor({0, 0, 0, 1, 1,  //
                                                                      0, 0, 1, 1, 1,  //
                                                                      0, 0, 0, 1, 1,  //
                                                                      0, 0, 0, 0, 0},
                                                                     torch::kLong)
                                                           .view({4, 5})));
}

TEST(PackedTokens, ATensorGoesToCompactRowsAndBackUnchanged) {
  const torch::Tensor mask =
      torch::tensor({1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0}, torch::kLong).view({3, 4});
  const PackedTokens p = pack_tokens(mask);
  ASSERT_EQ(p.longest, 3);
  const torch::Tensor x = torch::randn({3, 4, 2});  // (B, T, C)
  const torch::Tensor packed = p.pack(x);           // (N, C)
  ASSERT_EQ(packed.sizes(), (std::vector<int64_t>{6, 2}));
  EXPECT_TRUE(torch::equal(packed[2], x[1][0]));
  EXPECT_TRUE(torch::equal(packed[5], x[2][0]));
  const torch::Tensor rows = p.to_rows(packed);  // (B, L, C)
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_TRUE(torch::equal(rows[0].slice(0, 0, 2), x[0].slice(0, 0, 2)));
  EXPECT_TRUE(torch::equal(rows[1], x[1].slice(0, 0, 3)));
  EXPECT_TRUE(torch::equal(rows[2][0], x[2][0]));
  EXPECT_EQ(rows.masked_select(p.padding.unsqueeze(-1)).abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(p.from_rows(rows), packed));
}

TEST(PackedTokens, GradientsFlowBackThroughTheCompactRowsToTheRealTokensOnly) {
  const torch::Tensor mask = torch::tensor({1, 1, 1, 0, 1, 0}, torch::kLong).view({2, 3});
  const PackedTokens p = pack_tokens(mask);
  const torch::Tensor x = torch::randn({2, 3, 4}, torch::requires_grad());
  const torch::Tensor weights = torch::randn({2, 3, 4});
  (p.from_rows(p.to_rows(p.pack(x))) * p.pack(weights)).sum().backward();
  const torch::Tensor expected = weights * mask.unsqueeze(-1);
  EXPECT_TRUE(torch::equal(x.grad(), expected));
}

TEST(PackedTokens, FillersFromThePaddingMakeTheRowsAMultipleAndStayOutOfTheCompactRows) {
  // Rows of 2, 3 and 1 tokens: 6 real tokens, then the first 2 padding positions for 8 rows.
  const torch::Tensor mask =
      torch::tensor({1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0}, torch::kLong).view({3, 4});
  const PackedTokens p = pack_tokens(mask, 4);
  EXPECT_EQ(p.fillers, 2);
  EXPECT_TRUE(torch::equal(p.real, longs({0, 1, 4, 5, 6, 8, 2, 3})));
  EXPECT_TRUE(torch::equal(p.positions, longs({0, 1, 0, 1, 2, 0, 2, 3})));
  EXPECT_TRUE(torch::equal(p.slots, pack_tokens(mask).slots));
  EXPECT_TRUE(torch::equal(p.first, longs({0, 2, 5})));

  const torch::Tensor x = torch::randn({3, 4, 2}, torch::requires_grad());  // (B, T, C)
  const torch::Tensor packed = p.pack(x);                                   // (N + F, C)
  ASSERT_EQ(packed.sizes(), (std::vector<int64_t>{8, 2}));
  const torch::Tensor rows = p.to_rows(packed);  // (B, L, C)
  EXPECT_TRUE(torch::equal(rows, pack_tokens(mask).to_rows(packed.narrow(0, 0, 6))));
  const torch::Tensor back = p.from_rows(rows);  // (N + F, C)
  ASSERT_EQ(back.sizes(), packed.sizes());
  EXPECT_TRUE(torch::equal(back.narrow(0, 0, 6), packed.narrow(0, 0, 6)));
  EXPECT_EQ(back.narrow(0, 6, 2).abs().sum().item<double>(), 0.0);

  // Through the compact rows a filler gets no gradient, as the padding it was.
  const torch::Tensor weights = torch::randn({3, 4, 2});
  (back * p.pack(weights)).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), weights * mask.unsqueeze(-1)));
}

TEST(PackedTokens, FillersStopWhereThePaddingEnds) {
  const torch::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0}, torch::kLong).view({2, 3});
  const PackedTokens p = pack_tokens(mask, 8);  // 5 tokens, 1 padding position: 6 rows
  EXPECT_EQ(p.fillers, 1);
  EXPECT_EQ(p.real.size(0), 6);
  EXPECT_EQ(pack_tokens(torch::ones({2, 3}, torch::kLong), 8).fillers, 0);
  EXPECT_EQ(pack_tokens(mask, 5).fillers, 0);  // 5 is a multiple of 5
  const std::string zero = testing::input_error_of([&] { pack_tokens(mask, 0); });
  EXPECT_NE(zero.find("row_multiple = 0 must be >= 1"), std::string::npos) << zero;
}

TEST(PackedTokens, AMaskWithARowOfPaddingOnlyOrNotTwoDimensionalIsRefused) {
  const std::string empty_row = testing::input_error_of([] {
    pack_tokens(torch::tensor({1, 1, 0, 0}, torch::kLong).view({2, 2}));
  });
  EXPECT_NE(empty_row.find("every row of the attention mask needs a real token"), std::string::npos)
      << empty_row;
  const std::string flat =
      testing::input_error_of([] { pack_tokens(torch::ones({4}, torch::kLong)); });
  EXPECT_NE(flat.find("must be (B, T), got [4]"), std::string::npos) << flat;
}

TEST(PackedTokens, ScatterRowsPlacesRowsBitwiseAsIndexCopyWithZerosElsewhere) {
  torch::manual_seed(8);
  const torch::Tensor slots = longs({5, 0, 9, 3, 10});  // N = 5 of 12 positions, out of order
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    const torch::Tensor rows = torch::randn({7, 24}).to(dtype);  // N + 2 fillers, dropped
    const torch::Tensor scattered = scatter_rows(rows, slots, 12);
    const torch::Tensor expected =
        torch::zeros({12, 24}, rows.options()).index_copy_(0, slots, rows.narrow(0, 0, 5));
    EXPECT_EQ(scattered.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(scattered, expected)) << dtype;
    const torch::Tensor strided = torch::randn({24, 5}).to(dtype).t();  // ATen's way
    EXPECT_TRUE(
        torch::equal(scatter_rows(strided, slots, 12),
                     torch::zeros({12, 24}, rows.options()).index_copy_(0, slots, strided)));
  }
  // Many rows, as the OpenMP threads split them: every position written.
  const torch::Tensor many_slots = torch::randperm(3000, torch::kLong).narrow(0, 0, 2000);
  const torch::Tensor many = torch::randn({2000, 300});
  EXPECT_TRUE(torch::equal(scatter_rows(many, many_slots, 3000),
                           torch::zeros({3000, 300}).index_copy_(0, many_slots, many)));
}

TEST(PackedTokens, ScatterRowsRefusesASlotOutsideThePositions) {
  const torch::Tensor rows = torch::ones({2, 4});
  try {
    scatter_rows(rows, longs({1, 6}), 6);
    FAIL() << "no error";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("slot 6 of row 1 is outside [0, 6)"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(scatter_rows(rows, longs({0, 1, 2}), 6), std::logic_error);  // more slots than rows
}

}  // namespace
}  // namespace bigbatch::nn
