#include "bigbatch/data/instruction_records.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace bigbatch::data {
namespace {

using bigbatch::testing::input_error_of;
using bigbatch::testing::TempDir;
using ::testing::HasSubstr;

TEST(InstructionRecords, PromptAndResponseOfEveryLine) {
  TempDir dir;
  const std::string path = dir.write("data.jsonl",
                                     "{\"prompt\": \"Say hi\", \"response\": \"hi\", \"id\": 1}\n"
                                     "\n"
                                     "{\"response\": \"ünï\\n\", \"prompt\": \"\"}\n")
                               .string();
  const auto records = read_instruction_records(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].prompt, "Say hi");
  EXPECT_EQ(records[0].response, "hi");
  EXPECT_EQ(records[1].prompt, "");
  EXPECT_EQ(records[1].response, "ünï\n");
}

TEST(InstructionRecords, BadLinesAreNamedWithTheirNumber) {
  TempDir dir;
  const auto error_of = [&](const std::string& text) {
    const std::string path = dir.write("bad.jsonl", text).string();
    return input_error_of([&] { read_instruction_records(path); });
  };
  EXPECT_THAT(error_of("{\"prompt\": \"a\", \"response\": \"b\"}\n{oops\n"),
              HasSubstr("bad.jsonl:2: not a JSON object"));
  EXPECT_THAT(error_of("{\"prompt\": \"a\"}\n"),
              HasSubstr("bad.jsonl:1: needs a string field \"response\""));
  EXPECT_THAT(error_of("{\"prompt\": 3, \"response\": \"b\"}\n"),
              HasSubstr("needs a string field \"prompt\""));
  EXPECT_THAT(error_of("{\"messages\": []}\n"), HasSubstr("chat template"));
  EXPECT_THAT(error_of("\n\n"), HasSubstr("holds no record"));
  EXPECT_THAT(input_error_of([&] { read_instruction_records((dir.path() / "none").string()); }),
              HasSubstr("cannot open instruction data"));
}

}  // namespace
}  // namespace bigbatch::data
