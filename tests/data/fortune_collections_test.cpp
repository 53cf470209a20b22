#include "bigbatch/data/fortune_collections.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/core/check.h"
#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using bigbatch::testing::input_error_of;
using bigbatch::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Strings = std::vector<std::string>;
namespace fs = std::filesystem;

TEST(SplitFortunes, SeparatorLinesSplitAndTheLastLineBreakIsDropped) {
  EXPECT_THAT(split_fortunes("one\n%\ntwo\nlines\n%\n"), ElementsAre("one", "two\nlines"));
  EXPECT_THAT(split_fortunes(""), ElementsAre());
  EXPECT_THAT(split_fortunes("%\n"), ElementsAre());
  EXPECT_THAT(split_fortunes("only one, no separator\n"), ElementsAre("only one, no separator"));
}

TEST(SplitFortunes, CrLfSeparatorsAndInnerCrLfKept) {
  EXPECT_THAT(split_fortunes("a\r\nb\r\n%\r\nc\r\n%\r\n"), ElementsAre("a\r\nb", "c"));
}

TEST(SplitFortunes, MissingFinalSeparatorAndMissingFinalNewline) {
  EXPECT_THAT(split_fortunes("a\n%\nb\n"), ElementsAre("a", "b"));
  EXPECT_THAT(split_fortunes("a\n%\nb"), ElementsAre("a", "b"));
  EXPECT_THAT(split_fortunes("a\n%"), ElementsAre("a"));
  EXPECT_THAT(split_fortunes("a\n%\r"), ElementsAre("a"));
}

TEST(SplitFortunes, EmptyAndWhitespaceOnlyEntriesAreDropped) {
  EXPECT_THAT(split_fortunes("%\n%\na\n%\n%\n%\nb\n%\n"), ElementsAre("a", "b"));
  EXPECT_THAT(split_fortunes("a\n%\n  \t\n\n%\r\n\r\n%\nb\n"), ElementsAre("a", "b"));
}

TEST(SplitFortunes, TextBeforeTheFirstSeparatorIsAFortune) {
  EXPECT_THAT(split_fortunes("preamble\n%\nfirst\n%\n"), ElementsAre("preamble", "first"));
}

TEST(SplitFortunes, OnlyALineOfExactlyPercentSeparates) {
  EXPECT_THAT(split_fortunes("100%\n %\n%%\n% \n%-\nend\n"),
              ElementsAre("100%\n %\n%%\n% \n%-\nend"));
  // Inner blank lines and indentation survive; only the final line break goes.
  EXPECT_THAT(split_fortunes("  indented\n\n  more\n\n%\n"), ElementsAre("  indented\n\n  more\n"));
}

/// Three collections: "b" has 10 fortunes, "a" 20, "c" 3.
std::vector<std::pair<std::string, std::string>> three_collections() {
  std::string a, b, c;
  for (int i = 0; i < 20; ++i)
    a += "a fortune " + std::to_string(i) + "\n%\n";
  for (int i = 0; i < 10; ++i)
    b += "b" + std::to_string(i) + "\n%\n";
  for (int i = 0; i < 3; ++i)
    c += "c" + std::to_string(i) + "\n%\n";
  return {{"b", b}, {"a", a}, {"c", c}};
}

TEST(FortuneCollections, ClassesAreSortedNamesAndSplitIsStratified) {
  const auto options = FortuneCollectionsOptions().min_per_class(1).test_fraction(0.25).seed(7);
  const auto task = FortuneCollections::from_texts(three_collections(), options);
  EXPECT_EQ(task.class_names(), (Strings{"a", "b", "c"}));
  // round(0.25 * n) per class: a 5 of 20, b 3 of 10 (2.5 rounds away from 0), c 1 of 3.
  EXPECT_EQ(task.test().class_counts(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(task.train().class_counts(), (std::vector<int64_t>{15, 7, 2}));
  EXPECT_EQ(task.train().class_names(), task.test().class_names());
  // Every fortune is in exactly one split, with its class, and file order is kept per class.
  std::set<std::string> seen;
  for (const FortuneDataset* split : {&task.train(), &task.test()}) {
    std::string previous;
    int64_t previous_label = -1;
    for (int64_t i = 0; i < split->size(); ++i) {
      const std::string& text = split->text(i);
      EXPECT_TRUE(seen.insert(text).second) << text;
      EXPECT_EQ(task.class_names()[split->label(i)], text.substr(0, 1)) << text;
      if (split->label(i) == previous_label && text.size() == previous.size()) {
        EXPECT_LT(previous, text);
      }
      previous = text;
      previous_label = split->label(i);
    }
  }
  EXPECT_EQ(seen.size(), 33u);
  EXPECT_EQ(task.describe(),
            "33 fortunes from 3 collections, up to 256 bytes (0 truncated); "
            "train 24, test 9");
}

TEST(FortuneCollections, SplitDependsOnlyOnTheSeed) {
  const auto options = FortuneCollectionsOptions().min_per_class(1).test_fraction(0.3);
  const auto test_texts = [&](uint64_t seed) {
    const auto task = FortuneCollections::from_texts(three_collections(),
                                                     FortuneCollectionsOptions(options).seed(seed));
    Strings texts;
    for (int64_t i = 0; i < task.test().size(); ++i)
      texts.push_back(task.test().text(i));
    return texts;
  };
  EXPECT_EQ(test_texts(1), test_texts(1));
  EXPECT_NE(test_texts(1), test_texts(2));
  // No test split, and a class of one fortune keeps it in train.
  const auto none = FortuneCollections::from_texts(
      {{"x", "x1\n%\nx2\n"}, {"y", "y\n"}},
      FortuneCollectionsOptions().min_per_class(1).test_fraction(0.0));
  EXPECT_EQ(none.test().size(), 0);
  EXPECT_EQ(none.train().class_counts(), (std::vector<int64_t>{2, 1}));
  const auto most = FortuneCollections::from_texts(
      {{"x", "x1\n%\nx2\n"}, {"y", "y\n"}},
      FortuneCollectionsOptions().min_per_class(1).test_fraction(0.9));
  EXPECT_EQ(most.test().class_counts(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(most.train().class_counts(), (std::vector<int64_t>{1, 1}));
}

TEST(FortuneCollections, MinPerClassAndNamedCollections) {
  const auto all = three_collections();
  const auto ten =
      FortuneCollections::from_texts(all, FortuneCollectionsOptions().min_per_class(10));
  EXPECT_EQ(ten.class_names(), (Strings{"a", "b"}));
  const auto named = FortuneCollections::from_texts(
      all, FortuneCollectionsOptions().collections({"c", "a"}).min_per_class(100));
  EXPECT_EQ(named.class_names(), (Strings{"a", "c"}));  // sorted, min_per_class not applied
  EXPECT_EQ(named.train().size() + named.test().size(), 23);
}

TEST(FortuneCollections, BatchesArePaddedByteIdsAndClassIds) {
  const auto task = FortuneCollections::from_texts(
      {{"long", "abcdefgh\n%\nxyz\n"}, {"short", "\xff!\n"}},
      FortuneCollectionsOptions().min_per_class(1).test_fraction(0).max_bytes(5));
  const FortuneDataset& train = task.train();
  ASSERT_EQ(train.size(), 3);
  EXPECT_EQ(train.text(0), "abcde");
  EXPECT_EQ(train.truncated(), 1);
  const Batch batch = train.get({2, 0, 1});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(batch.inputs, torch::tensor({255, 33, 256, 256, 256,  //
                                                        97, 98, 99, 100, 101,    //
                                                        120, 121, 122, 256, 256})
                                             .view({3, 5})));
  EXPECT_TRUE(torch::equal(batch.targets, torch::tensor({1, 0, 0})));
  EXPECT_EQ(kFortunePadId, 256);
  EXPECT_EQ(train.describe(), "3 fortunes from 2 collections, up to 5 bytes (1 truncated)");
  EXPECT_THROW(train.get({3}), std::logic_error);
}

TEST(FortuneCollections, ErrorsNameTheProblem) {
  const auto all = three_collections();
  const std::string missing = input_error_of([&] {
    FortuneCollections::from_texts(all, FortuneCollectionsOptions().collections({"a", "zz"}));
  });
  EXPECT_THAT(missing, HasSubstr("fortune collection 'zz' is not in the given texts"));
  EXPECT_THAT(missing, HasSubstr("collections there: a, b, c"));
  const std::string few = input_error_of(
      [&] { FortuneCollections::from_texts(all, FortuneCollectionsOptions().min_per_class(15)); });
  EXPECT_THAT(few, HasSubstr("needs at least 2 collections, got 1"));
  EXPECT_THAT(few, HasSubstr("min_per_class = 15"));
  EXPECT_THAT(few, HasSubstr("largest collections (fortunes): a 20, b 10, c 3"));
  const std::string one = input_error_of(
      [&] { FortuneCollections::from_texts(all, FortuneCollectionsOptions().collections({"a"})); });
  EXPECT_THAT(one, HasSubstr("needs at least 2 collections, got 1"));
  const std::string empty = input_error_of([&] {
    FortuneCollections::from_texts({{"a", "x\n%\n"}, {"blank", "%\n  \n%\n"}},
                                   FortuneCollectionsOptions().collections({"a", "blank"}));
  });
  EXPECT_THAT(empty, HasSubstr("fortune collection 'blank' in the given texts has no fortunes"));
  EXPECT_THAT(input_error_of([&] {
                FortuneCollections::from_texts(all, FortuneCollectionsOptions().max_bytes(0));
              }),
              HasSubstr("max_bytes must be at least 1, got 0"));
  EXPECT_THAT(input_error_of([&] {
                FortuneCollections::from_texts(all, FortuneCollectionsOptions().test_fraction(1));
              }),
              HasSubstr("test_fraction must be in [0, 1), got 1"));
}

TEST(FortuneCollections, DirectoryRulesForFiles) {
  TempDir dir;
  std::string many;
  for (int i = 0; i < 4; ++i)
    many += "fortune " + std::to_string(i) + "\n%\n";
  dir.write("law", many);
  dir.write("art", many);
  dir.write("art.dat", std::string("\0\0\0\2index", 9));  // strfile index: skipped by name
  fs::create_symlink(dir.path() / "art", dir.path() / "art.u8");
  fs::create_symlink(dir.path() / "law", dir.path() / "law-link");  // symlink: skipped
  dir.write(".hidden", many);
  dir.write("off/rude", many);                              // subdirectory: not read
  dir.write("image", std::string("GIF89a\0\0binary", 14));  // NUL byte: not text
  dir.write("tiny", "just one\n");                          // below min_per_class
  const auto task = FortuneCollections::load(
      FortuneCollectionsOptions().directory(dir.path().string()).min_per_class(2));
  EXPECT_EQ(task.class_names(), (Strings{"art", "law"}));
  EXPECT_EQ(task.skipped(), Strings{"image: not text (holds a NUL byte)"});
  EXPECT_EQ(task.train().size() + task.test().size(), 8);

  const std::string named = input_error_of([&] {
    FortuneCollections::load(
        FortuneCollectionsOptions().directory(dir.path().string()).collections({"art", "image"}));
  });
  EXPECT_THAT(named, HasSubstr("'image' is not in '" + dir.path().string() + "'"));
  EXPECT_THAT(named, HasSubstr("(skipped: not text (holds a NUL byte))"));
  EXPECT_THAT(named, HasSubstr("collections there: art, law, tiny"));
}

TEST(FortuneCollections, OneFolderPerClassOfTextFiles) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) {
    dir.write("pos/review" + std::to_string(i) + ".txt", "good %\nthing " + std::to_string(i));
    dir.write("neg/review" + std::to_string(i) + ".txt", "bad " + std::to_string(i) + "\n");
  }
  dir.write("neg/blank.txt", " \n");                      // blank: dropped
  dir.write("neg/.hidden", "secret");                     // hidden: not read
  dir.write("neg/image.bin", std::string("GIF\0\0", 5));  // NUL byte: not text
  dir.write("few/only.txt", "alone");                     // below min_per_class
  const auto task = FortuneCollections::load(FortuneCollectionsOptions()
                                                 .directory(dir.path().string())
                                                 .min_per_class(2)
                                                 .test_fraction(0.2));
  EXPECT_EQ(task.class_names(), (Strings{"neg", "pos"}));
  EXPECT_EQ(task.skipped(), Strings{"neg/image.bin: not text (holds a NUL byte)"});
  EXPECT_EQ(task.train().size(), 8);
  EXPECT_EQ(task.test().size(), 2);
  // Every file is one sample, whole: a "%" line does not split it.
  std::set<std::string> texts;
  for (int64_t i = 0; i < task.train().size(); ++i)
    texts.insert(task.train().text(i));
  for (int64_t i = 0; i < task.test().size(); ++i)
    texts.insert(task.test().text(i));
  EXPECT_EQ(texts.count("good %\nthing 3"), 1u);
  EXPECT_EQ(texts.count("bad 0\n"), 1u);
  EXPECT_THAT(task.describe(), HasSubstr("10 texts from 2 folders"));
}

TEST(FortuneCollections, MissingOrEmptyDirectoryIsAnInputError) {
  TempDir dir;
  const std::string missing = (dir.path() / "nowhere").string();
  EXPECT_THAT(input_error_of([&] {
                FortuneCollections::load(FortuneCollectionsOptions().directory(missing));
              }),
              HasSubstr("fortune directory '" + missing + "' does not exist"));
  const std::string file = dir.write("file", "a\n%\n").string();
  EXPECT_THAT(input_error_of(
                  [&] { FortuneCollections::load(FortuneCollectionsOptions().directory(file)); }),
              HasSubstr("'" + file + "' is not a directory"));
  const fs::path empty = dir.path() / "empty";
  fs::create_directory(empty);
  dir.write("empty/art.dat", "index");
  EXPECT_THAT(input_error_of([&] {
                FortuneCollections::load(FortuneCollectionsOptions().directory(empty.string()));
              }),
              HasSubstr("'" + empty.string() + "' has no fortune collections"));
}

TEST(FortuneCollections, RealFortunesDirectory) {
  const std::string directory = FortuneCollectionsOptions().directory();
  if (!fs::exists(fs::path(directory) / "computers"))
    GTEST_SKIP() << "the fortunes package is not installed: apt-get install fortunes";
  const auto task = FortuneCollections::load();
  std::cout << task.describe() << "\n";
  const auto counts = [](const FortuneCollections& t) {
    std::vector<int64_t> total = t.train().class_counts();
    const std::vector<int64_t> test = t.test().class_counts();
    for (size_t k = 0; k < total.size(); ++k)
      total[k] += test[k];
    return total;
  };
  const std::vector<int64_t> per_class = counts(task);
  for (size_t k = 0; k < per_class.size(); ++k) {
    std::cout << "  " << task.class_names()[k] << " " << per_class[k] << "\n";
    EXPECT_GE(per_class[k], 50) << task.class_names()[k];
  }
  EXPECT_GE(task.class_names().size(), 20u);
  EXPECT_TRUE(std::is_sorted(task.class_names().begin(), task.class_names().end()));
  const Strings& names = task.class_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "computers"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "computers.u8"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "computers.dat"), names.end());
  // The split is deterministic: a second load gives the same test fortunes.
  const auto again = FortuneCollections::load();
  ASSERT_EQ(again.test().size(), task.test().size());
  for (int64_t i = 0; i < task.test().size(); i += 97)
    EXPECT_EQ(again.test().text(i), task.test().text(i));
  const Batch batch = task.train().get({0, 1});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 256}));
  EXPECT_LE(batch.inputs.max().item<int64_t>(), kFortunePadId);
}

}  // namespace
}  // namespace bigbatch::data
