#include "bigbatch/data/sequence_dataset.h"

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

/// A (rows, T) int64 tensor of the bytes of equal-length strings.
torch::Tensor rows_of(const std::vector<std::string>& rows) {
  std::vector<int64_t> values;
  for (const std::string& row : rows) {
    for (const char c : row)
      values.push_back(static_cast<uint8_t>(c));
  }
  const auto count = static_cast<int64_t>(rows.size());
  return torch::tensor(values, torch::kLong).reshape({count, -1});
}

TEST(SequenceDataset, InputsAndShiftedTargets) {
  // "hello world!" has 12 bytes; T = 4: samples start at bytes 0, 4 and 8.
  const SequenceDataset dataset(bytes_of("hello world!"), SequenceDatasetOptions(4));
  EXPECT_EQ(dataset.size(), 3);
  const Batch batch = dataset.get({1, 0});
  EXPECT_EQ(batch.size(), 2);
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kLong);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kLong);
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(torch::equal(batch.inputs, rows_of({"o wo", "hell"})));
  EXPECT_TRUE(torch::equal(batch.targets, rows_of({" wor", "ello"})));
}

TEST(SequenceDataset, FinalPartialSampleIsPadded) {
  const SequenceDataset dataset(bytes_of("hello world!"),
                                SequenceDatasetOptions(4).ignore_index(-7));
  const Batch batch = dataset.get({2});  // bytes 8..11: "rld!"
  const auto r = static_cast<int64_t>('r');
  const auto l = static_cast<int64_t>('l');
  const auto d = static_cast<int64_t>('d');
  const auto bang = static_cast<int64_t>('!');
  EXPECT_TRUE(torch::equal(batch.inputs, torch::tensor({r, l, d, int64_t{0}}).reshape({1, 4})));
  EXPECT_TRUE(
      torch::equal(batch.targets, torch::tensor({l, d, bang, int64_t{-7}}).reshape({1, 4})));
}

TEST(SequenceDataset, DefaultIgnoreIndexPadsTargets) {
  // 10 bytes, T = 4: the last sample has bytes 8 and 9 only, one input and one target.
  const SequenceDataset dataset(bytes_of("0123456789"), SequenceDatasetOptions(4));
  EXPECT_EQ(dataset.size(), 3);
  const Batch batch = dataset.get({2});
  EXPECT_TRUE(torch::equal(
      batch.inputs,
      torch::tensor({int64_t{'8'}, int64_t{0}, int64_t{0}, int64_t{0}}).reshape({1, 4})));
  EXPECT_TRUE(torch::equal(
      batch.targets,
      torch::tensor({int64_t{'9'}, int64_t{-100}, int64_t{-100}, int64_t{-100}}).reshape({1, 4})));
}

TEST(SequenceDataset, SizeForExactMultipleAndRemainder) {
  const auto size_for = [](int64_t n, int64_t context) {
    return SequenceDataset(std::vector<uint8_t>(static_cast<size_t>(n), 'x'),
                           SequenceDatasetOptions(context))
        .size();
  };
  EXPECT_EQ(size_for(13, 4), 3);  // 3 * 4 + 1 bytes: exactly 3 full samples
  EXPECT_EQ(size_for(12, 4), 3);  // the third sample lacks its last target
  EXPECT_EQ(size_for(14, 4), 4);  // the fourth sample has 2 bytes: one input, one target
  EXPECT_EQ(size_for(2, 4), 1);
  EXPECT_EQ(size_for(2, 1), 1);
  EXPECT_EQ(size_for(5, 1), 4);  // T = 1: every byte but the last is an input
}

TEST(SequenceDataset, SharesBytesWithoutCopy) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(bytes_of("abcdefghi"));
  const SequenceDataset dataset(bytes, SequenceDatasetOptions(4));
  EXPECT_EQ(&dataset.bytes(), bytes.get());
  EXPECT_EQ(dataset.size(), 2);
}

TEST(SequenceDataset, EmptyIndicesGiveAnEmptyBatch) {
  const SequenceDataset dataset(bytes_of("abcdefghi"), SequenceDatasetOptions(4));
  const Batch batch = dataset.get({});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(batch.targets.sizes(), (std::vector<int64_t>{0, 4}));
}

TEST(SequenceDataset, Describe) {
  const SequenceDataset dataset(std::vector<uint8_t>(78'977, 'x'), SequenceDatasetOptions(64));
  EXPECT_EQ(dataset.describe(), "1,234 sequences of 64 bytes (78,977 bytes)");
}

TEST(SequenceDataset, TooFewBytesIsAnInputErrorNamingTheSizes) {
  try {
    SequenceDataset(bytes_of("a"), SequenceDatasetOptions(64).name("corpus split 'val'"));
    FAIL() << "expected bigbatch::InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("corpus split 'val' has 1 bytes; need at least 2"));
    EXPECT_THAT(e.what(), HasSubstr("context 64"));
  }
  EXPECT_THROW(SequenceDataset(std::vector<uint8_t>{}, SequenceDatasetOptions(4)), InputError);
}

TEST(SequenceDataset, NonPositiveContextIsAnInputError) {
  try {
    SequenceDataset(bytes_of("abc"), SequenceDatasetOptions(0).name("train"));
    FAIL() << "expected bigbatch::InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train"));
    EXPECT_THAT(e.what(), HasSubstr("got 0"));
  }
}

TEST(SequenceDataset, OutOfRangeIndexIsALogicError) {
  const SequenceDataset dataset(bytes_of("abcdefghi"), SequenceDatasetOptions(4));
  EXPECT_THROW(dataset.get({2}), std::logic_error);
  EXPECT_THROW(dataset.get({-1}), std::logic_error);
}

}  // namespace
}  // namespace bigbatch::data
