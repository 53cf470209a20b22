#include "bigbatch/data/text_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(const std::string& text) {
  return {text.begin(), text.end()};
}

std::string text_of(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

/// The message of the InputError that `body` throws, or a failure if it throws none.
template <typename Body>
std::string input_error_of(Body body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected bigbatch::InputError";
  return "";
}

TEST(TextCorpus, DirectoryConcatenatesUsableFilesByName) {
  bigbatch::testing::TempDir dir;
  const fs::path b = dir.write("b.txt", "BBB");
  const fs::path a = dir.write("a", "aa\n");
  dir.write("a.dat", "index");  // fortunes index: skipped
  const fs::path c = dir.write("c-10", "c10");
  dir.write("sub/inner.txt", "nested");        // not directly in the directory: skipped
  fs::create_symlink(a, dir.path() / "a.u8");  // symlink: skipped
  const auto corpus =
      TextCorpus::load(TextCorpusOptions().path(dir.path().string()).val_fraction(0));
  EXPECT_EQ(corpus.files(), (std::vector<std::string>{a.string(), b.string(), c.string()}));
  EXPECT_EQ(text_of(corpus.train()), "aa\nBBBc10");
  EXPECT_TRUE(corpus.val().empty());
  EXPECT_EQ(corpus.total_bytes(), 9);
  EXPECT_EQ(corpus.val_period(), 0);
}

TEST(TextCorpus, SingleFileIsReadWhole) {
  bigbatch::testing::TempDir dir;
  std::string text = "line one\nline two\n";
  text += '\0';
  text += "\xff\x80 binary bytes survive";
  const fs::path file = dir.write("corpus.bin", text);
  const auto corpus = TextCorpus::load(TextCorpusOptions().path(file.string()).val_fraction(0));
  EXPECT_EQ(corpus.files(), std::vector<std::string>{file.string()});
  EXPECT_EQ(text_of(corpus.train()), text);
  EXPECT_EQ(corpus.total_bytes(), 42);
  EXPECT_EQ(corpus.describe(), "42 bytes from " + file.string() + " (train 42, val 0)");
}

TEST(TextCorpus, SplitPutsEveryPeriodthBlockInValidation) {
  const auto alphabet = bytes_of("abcdefghijklmnopqrstuvwxyz");
  // Blocks of 3: abc def ghi jkl mno pqr stu vwx yz (indices 0..8).
  // val_fraction 0.25 -> period 4 -> blocks 3 and 7.
  const auto quarter =
      TextCorpus::from_bytes(alphabet, TextCorpusOptions().val_fraction(0.25).split_block(3));
  EXPECT_EQ(quarter.val_period(), 4);
  EXPECT_EQ(text_of(quarter.train()), "abcdefghimnopqrstuyz");
  EXPECT_EQ(text_of(quarter.val()), "jklvwx");
  EXPECT_EQ(quarter.total_bytes(), 26);
  EXPECT_TRUE(quarter.files().empty());
  EXPECT_EQ(quarter.describe(), "26 bytes in memory (train 20, val 6)");
  // val_fraction 0.3 -> period round(3.33) = 3 -> blocks 2, 5 and the partial block 8.
  const auto third =
      TextCorpus::from_bytes(alphabet, TextCorpusOptions().val_fraction(0.3).split_block(3));
  EXPECT_EQ(third.val_period(), 3);
  EXPECT_EQ(text_of(third.train()), "abcdefjklmnostuvwx");
  EXPECT_EQ(text_of(third.val()), "ghipqryz");
  // val_fraction 0.5 -> period 2 -> the odd blocks.
  const auto half =
      TextCorpus::from_bytes(alphabet, TextCorpusOptions().val_fraction(0.5).split_block(5));
  // Blocks of 5: abcde fghij klmno pqrst uvwxy z.
  EXPECT_EQ(text_of(half.train()), "abcdeklmnouvwxy");
  EXPECT_EQ(text_of(half.val()), "fghijpqrstz");
  // A small val_fraction on a small corpus leaves validation empty.
  const auto tiny =
      TextCorpus::from_bytes(alphabet, TextCorpusOptions().val_fraction(0.01).split_block(3));
  EXPECT_EQ(tiny.val_period(), 100);
  EXPECT_EQ(text_of(tiny.train()), "abcdefghijklmnopqrstuvwxyz");
  EXPECT_TRUE(tiny.val().empty());
}

TEST(TextCorpus, SmallCorpusGetsSmallerBlocksAndAValidationSplit) {
  // One block of 100 would hold the whole alphabet; period 4 needs 4 blocks: 26 / 4 = 6 bytes.
  const auto small =
      TextCorpus::from_bytes(bytes_of("abcdefghijklmnopqrstuvwxyz"),
                             TextCorpusOptions().val_fraction(0.25).split_block(100));
  EXPECT_EQ(small.block_bytes(), 6);
  // Blocks abcdef ghijkl mnopqr stuvwx yz: block 3 is validation.
  EXPECT_EQ(text_of(small.val()), "stuvwx");
  EXPECT_EQ(text_of(small.train()), "abcdefghijklmnopqryz");
  // A corpus with enough blocks keeps split_block.
  const auto large = TextCorpus::from_bytes(std::vector<uint8_t>(40'000, 'a'));
  EXPECT_EQ(large.block_bytes(), 4096);
  EXPECT_EQ(large.val().size(), 40000u - 9 * 4096);  // block 9 is the short last one
}

TEST(TextCorpus, DefaultOptions) {
  const TextCorpusOptions options;
  EXPECT_EQ(options.path(), "/usr/share/games/fortunes");
  EXPECT_DOUBLE_EQ(options.val_fraction(), 0.1);
  EXPECT_EQ(options.split_block(), 4096);
}

TEST(TextCorpus, MissingPathIsAnInputErrorNamingThePath) {
  bigbatch::testing::TempDir dir;
  const std::string missing = (dir.path() / "no-such-corpus").string();
  const std::string message =
      input_error_of([&] { TextCorpus::load(TextCorpusOptions().path(missing)); });
  EXPECT_THAT(message, HasSubstr(missing));
  EXPECT_THAT(message, HasSubstr("does not exist"));
}

TEST(TextCorpus, EmptyFileIsAnInputErrorNamingThePath) {
  bigbatch::testing::TempDir dir;
  const std::string empty = dir.write("empty.txt", "").string();
  const std::string message =
      input_error_of([&] { TextCorpus::load(TextCorpusOptions().path(empty)); });
  EXPECT_THAT(message, HasSubstr(empty));
  EXPECT_THAT(message, HasSubstr("is empty"));
}

TEST(TextCorpus, DirectoryWithOnlyDatFilesIsAnInputError) {
  bigbatch::testing::TempDir dir;
  dir.write("art.dat", "index");
  dir.write("law.dat", "index");
  const std::string message =
      input_error_of([&] { TextCorpus::load(TextCorpusOptions().path(dir.path().string())); });
  EXPECT_THAT(message, HasSubstr(dir.path().string()));
  EXPECT_THAT(message, HasSubstr("no usable text files"));
}

TEST(TextCorpus, OutOfRangeOptionsAreInputErrorsNamingTheValue) {
  const auto bytes = bytes_of("some text");
  const std::string fraction =
      input_error_of([&] { TextCorpus::from_bytes(bytes, TextCorpusOptions().val_fraction(0.7)); });
  EXPECT_THAT(fraction, HasSubstr("val_fraction"));
  EXPECT_THAT(fraction, HasSubstr("0.7"));
  const std::string negative = input_error_of(
      [&] { TextCorpus::from_bytes(bytes, TextCorpusOptions().val_fraction(-0.1)); });
  EXPECT_THAT(negative, HasSubstr("-0.1"));
  const std::string block =
      input_error_of([&] { TextCorpus::from_bytes(bytes, TextCorpusOptions().split_block(0)); });
  EXPECT_THAT(block, HasSubstr("split_block"));
  EXPECT_THAT(block, HasSubstr("got 0"));
  // The options are checked before the path is read.
  const std::string on_load = input_error_of(
      [&] { TextCorpus::load(TextCorpusOptions().path("/nonexistent").val_fraction(0.7)); });
  EXPECT_THAT(on_load, HasSubstr("0.7"));
  EXPECT_THAT(input_error_of([] { TextCorpus::from_bytes({}); }), HasSubstr("empty"));
}

TEST(TextCorpus, UnreadableFileIsAnInputError) {
  if (geteuid() == 0)
    GTEST_SKIP() << "root reads files regardless of permissions";
  bigbatch::testing::TempDir dir;
  const fs::path file = dir.write("secret.txt", "text");
  fs::permissions(file, fs::perms::none);
  const std::string message =
      input_error_of([&] { TextCorpus::load(TextCorpusOptions().path(file.string())); });
  EXPECT_THAT(message, HasSubstr(file.string()));
  EXPECT_THAT(message, HasSubstr("cannot read"));
}

TEST(TextCorpus, DefaultFortunesCorpus) {
  const TextCorpusOptions options;
  if (!fs::is_directory(options.path()))
    GTEST_SKIP() << options.path() << " is not installed";
  const auto corpus = TextCorpus::load(options);
  EXPECT_GT(corpus.total_bytes(), 1'000'000);
  EXPECT_FALSE(corpus.files().empty());
  for (const std::string& file : corpus.files()) {
    EXPECT_NE(fs::path(file).extension(), ".dat") << file;
    EXPECT_FALSE(fs::is_symlink(file)) << file;
  }
  EXPECT_EQ(static_cast<int64_t>(corpus.train().size() + corpus.val().size()),
            corpus.total_bytes());
  const double fraction =
      static_cast<double>(corpus.val().size()) / static_cast<double>(corpus.total_bytes());
  EXPECT_NEAR(fraction, 0.1, 0.005);
}

}  // namespace
}  // namespace bigbatch::data
