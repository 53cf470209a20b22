#include "bigbatch/data/text_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using bigbatch::testing::input_error_of;
using bigbatch::testing::TempDir;
using ::testing::HasSubstr;
using Strings = std::vector<std::string>;

TEST(ReadDocuments, FortunesSplitAndOtherFilesWhole) {
  TempDir dir;
  dir.write("b-fortunes", "one\n%\ntwo\nlines\n%\n");
  dir.write("a-essay.txt", "an essay\n\nin two paragraphs\n");
  dir.write(".hidden", "not read");
  dir.write("b-fortunes.dat", "index");
  dir.write("sub/deeper.txt", "not read either");
  EXPECT_EQ(read_documents(dir.path().string()),
            (Strings{"an essay\n\nin two paragraphs", "one", "two\nlines"}));
  EXPECT_EQ(read_documents((dir.path() / "b-fortunes").string()), (Strings{"one", "two\nlines"}));
}

TEST(ReadDocuments, BadPathsAreNamed) {
  TempDir dir;
  const std::string missing = (dir.path() / "nowhere").string();
  EXPECT_THAT(input_error_of([&] { read_documents(missing); }),
              HasSubstr("text data '" + missing + "' does not exist"));
  const std::string binary = dir.write("image", std::string("GIF\0\0", 5)).string();
  EXPECT_THAT(input_error_of([&] { read_documents(binary); }),
              HasSubstr("'" + binary + "' is not text (holds a NUL byte)"));
  dir.write("empty/blank", "\n%\n  \n");
  EXPECT_THAT(input_error_of([&] { read_documents((dir.path() / "empty").string()); }),
              HasSubstr("holds no document"));
}

}  // namespace
}  // namespace bigbatch::data
