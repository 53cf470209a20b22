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

TEST(InstructionRecords, ChatRecordsKeepTheirMessagesAndTools) {
  TempDir dir;
  const std::string path =
      dir.write("chat.jsonl",
                "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                "{\"role\": \"user\", \"content\": \"2+2?\"}, "
                "{\"role\": \"assistant\", \"content\": \"4\", \"name\": \"calc\"}]}\n"
                "{\"prompt\": \"p\", \"response\": \"r\"}\n"
                "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, "
                "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}], "
                "\"tools\": [{\"type\": \"function\"}]}\n")
          .string();
  const auto records = read_instruction_records(path);
  ASSERT_EQ(records.size(), 3u);
  ASSERT_TRUE(records[0].is_chat());
  EXPECT_EQ(records[0].messages.size(), 3u);
  EXPECT_EQ(records[0].messages[2]["name"], "calc");  // kept for the template
  EXPECT_TRUE(records[0].tools.is_null());
  EXPECT_FALSE(records[1].is_chat());
  EXPECT_EQ(records[1].response, "r");
  EXPECT_EQ(records[2].tools.size(), 1u);
}

TEST(InstructionRecords, BadLinesAreNamedWithTheirNumber) {
  TempDir dir;
  const auto error_of = [&](const std::string& text) {
    const std::string path = dir.write("bad.jsonl", text).string();
    return input_error_of([&] { read_instruction_records(path); });
  };
  EXPECT_THAT(error_of("{\"prompt\": \"a\", \"response\": \"b\"}\n{oops\n"),
              HasSubstr("bad.jsonl:2: not valid JSON ([json.exception.parse_error.101]"));
  EXPECT_THAT(error_of("[\"prompt\", \"response\"]\n"),
              HasSubstr("bad.jsonl:1: not a JSON object but array"));
  EXPECT_THAT(error_of("{\"prompt\": \"a\"}\n"),
              HasSubstr("bad.jsonl:1: needs a string field \"response\""));
  EXPECT_THAT(error_of("{\"prompt\": 3, \"response\": \"b\"}\n"),
              HasSubstr("needs a string field \"prompt\""));
  EXPECT_THAT(error_of("{\"messages\": []}\n"),
              HasSubstr("bad.jsonl:1: \"messages\" must be a non-empty list"));
  EXPECT_THAT(error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, 3]}\n"),
              HasSubstr("bad.jsonl:1: messages[1]: not a JSON object"));
  EXPECT_THAT(error_of("{\"messages\": [{\"content\": \"hi\"}]}\n"),
              HasSubstr("messages[0]: needs a string field \"role\""));
  EXPECT_THAT(error_of("{\"messages\": [{\"role\": \"user\", \"content\": [1]}]}\n"),
              HasSubstr("messages[0]: needs a string field \"content\""));
  EXPECT_THAT(error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"),
              HasSubstr("bad.jsonl:1: the conversation has no \"assistant\" message"));
  EXPECT_THAT(error_of("{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}], "
                       "\"tools\": 3}\n"),
              HasSubstr("\"tools\" must be a list"));
  EXPECT_THAT(error_of("\n\n"), HasSubstr("holds no record"));
  EXPECT_THAT(input_error_of([&] { read_instruction_records((dir.path() / "none").string()); }),
              HasSubstr("cannot open instruction data"));
}

}  // namespace
}  // namespace bigbatch::data
