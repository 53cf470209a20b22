#include "bigbatch/data/context_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bigbatch/core/check.h"

namespace bigbatch::data {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> bytes_of(const std::string& text) {
  return {text.begin(), text.end()};
}

/// An int64 tensor of the bytes of `text`.
torch::Tensor ids_of(const std::string& text) {
  std::vector<int64_t> values;
  for (const char c : text)
    values.push_back(static_cast<uint8_t>(c));
  return torch::tensor(values, torch::kLong);
}

TEST(ContextDataset, WindowsAndNextByte) {
  // 6 bytes, k = 3: windows start at 0, 1, 2.
  const ContextDataset dataset(bytes_of("abcdef"), ContextDatasetOptions(3));
  EXPECT_EQ(dataset.size(), 3);
  const Batch batch = dataset.get({2, 0, 1, 2});
  EXPECT_EQ(batch.size(), 4);
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kLong);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kLong);
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(batch.targets.sizes(), (std::vector<int64_t>{4}));
  EXPECT_TRUE(torch::equal(batch.inputs, ids_of("cdeabcbcdcde").reshape({4, 3})));
  EXPECT_TRUE(torch::equal(batch.targets, ids_of("fdef")));
}

TEST(ContextDataset, HighBytesStayUnsigned) {
  const ContextDataset dataset(std::vector<uint8_t>{0xff, 0x80, 0x00}, ContextDatasetOptions(1));
  const Batch batch = dataset.get({0, 1});
  EXPECT_TRUE(
      torch::equal(batch.inputs, torch::tensor({int64_t{255}, int64_t{128}}).reshape({2, 1})));
  EXPECT_TRUE(torch::equal(batch.targets, torch::tensor({int64_t{128}, int64_t{0}})));
}

TEST(ContextDataset, SizeIsBytesMinusContext) {
  EXPECT_EQ(ContextDataset(std::vector<uint8_t>(9, 'x'), ContextDatasetOptions(8)).size(), 1);
  EXPECT_EQ(ContextDataset(std::vector<uint8_t>(100, 'x'), ContextDatasetOptions(8)).size(), 92);
  EXPECT_EQ(ContextDataset(std::vector<uint8_t>(2, 'x'), ContextDatasetOptions(1)).size(), 1);
}

TEST(ContextDataset, Describe) {
  const ContextDataset dataset(std::vector<uint8_t>(1'242, 'x'), ContextDatasetOptions(8));
  EXPECT_EQ(dataset.describe(), "1,234 contexts of 8 bytes (1,242 bytes)");
}

TEST(ContextDataset, TooFewBytesIsAnInputErrorNamingTheSizes) {
  try {
    ContextDataset(bytes_of("abcdefgh"), ContextDatasetOptions(8).name("corpus split 'val'"));
    FAIL() << "expected bigbatch::InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("corpus split 'val' has 8 bytes; need at least 9"));
  }
  EXPECT_THROW(ContextDataset(bytes_of("abc"), ContextDatasetOptions(0)), InputError);
}

TEST(ContextDataset, OutOfRangeIndexIsALogicError) {
  const ContextDataset dataset(bytes_of("abcdef"), ContextDatasetOptions(3));
  EXPECT_THROW(dataset.get({3}), std::logic_error);
}

}  // namespace
}  // namespace bigbatch::data
