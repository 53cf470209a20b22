#include "bigbatch/core/bytes.h"

#include <gtest/gtest.h>

#include <limits>

#include "bigbatch/core/check.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

std::string error_of(const std::string& text) {
  return testing::input_error_of([&] { parse_bytes(text, "memory.budget"); });
}

TEST(Bytes, ParsesBinaryDecimalAndPlainSizes) {
  EXPECT_EQ(parse_bytes("1.5GiB", "f"), 1610612736);
  EXPECT_EQ(parse_bytes("512MiB", "f"), 536870912);
  EXPECT_EQ(parse_bytes("64KiB", "f"), 65536);
  EXPECT_EQ(parse_bytes("2TiB", "f"), 2199023255552);
  EXPECT_EQ(parse_bytes("2GB", "f"), 2000000000);
  EXPECT_EQ(parse_bytes("2MB", "f"), 2000000);
  EXPECT_EQ(parse_bytes("1.25KB", "f"), 1250);
  EXPECT_EQ(parse_bytes("3TB", "f"), 3000000000000);
  EXPECT_EQ(parse_bytes("1048576", "f"), 1048576);
  EXPECT_EQ(parse_bytes("812B", "f"), 812);
  EXPECT_EQ(parse_bytes("0", "f"), 0);
  EXPECT_EQ(parse_bytes("0.5KiB", "f"), 512);
  EXPECT_EQ(parse_bytes(".25MiB", "f"), 262144);
  EXPECT_EQ(parse_bytes("9223372036854775807", "f"), std::numeric_limits<int64_t>::max());
}

TEST(Bytes, UnitsAreCaseInsensitiveAndMayFollowASpace) {
  EXPECT_EQ(parse_bytes("1.5 gib", "f"), 1610612736);
  EXPECT_EQ(parse_bytes("512 MIB", "f"), 536870912);
  EXPECT_EQ(parse_bytes("  64kib ", "f"), 65536);
  EXPECT_EQ(parse_bytes("2 gb", "f"), 2000000000);
  EXPECT_EQ(parse_bytes("2Kb", "f"), 2000);
  EXPECT_EQ(parse_bytes("812 b", "f"), 812);
}

TEST(Bytes, FractionsRoundToTheNearestByte) {
  EXPECT_EQ(parse_bytes("1.001KiB", "f"), 1025);  // 1025.024
  EXPECT_EQ(parse_bytes("0.0015KB", "f"), 2);     // 1.5 rounds away from zero
  EXPECT_EQ(parse_bytes("1.0", "f"), 1);          // a whole number written with a point
  EXPECT_EQ(parse_bytes("1.1GB", "f"), 1100000000);
}

TEST(Bytes, ErrorsNameTheFieldTheTextAndTheAcceptedForms) {
  const std::string unknown = error_of("12XB");
  EXPECT_NE(unknown.find("memory.budget = \"12XB\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown unit \"XB\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("1048576"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("1.5GiB"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("2GB"), std::string::npos) << unknown;
  EXPECT_NE(error_of("").find("it is empty"), std::string::npos);
  EXPECT_NE(error_of("   ").find("it is empty"), std::string::npos);
  EXPECT_NE(error_of("-1").find("negative"), std::string::npos);
  EXPECT_NE(error_of("-1GiB").find("memory.budget = \"-1GiB\""), std::string::npos);
  EXPECT_NE(error_of("abc").find("does not start with a number"), std::string::npos);
  EXPECT_NE(error_of("GiB").find("does not start with a number"), std::string::npos);
  EXPECT_NE(error_of("1.GiB").find("a digit must follow"), std::string::npos);
  EXPECT_NE(error_of("1.5.5GiB").find("unknown unit \".5GiB\""), std::string::npos);
  EXPECT_NE(error_of("1e9").find("unknown unit \"e9\""), std::string::npos);
  EXPECT_NE(error_of("1.5").find("whole number"), std::string::npos);
  EXPECT_NE(error_of("1.5B").find("whole number"), std::string::npos);
  EXPECT_NE(error_of("9223372036854775808").find("larger than"), std::string::npos);
  EXPECT_NE(error_of("8388608TiB").find("larger than"), std::string::npos);  // 2^63 bytes
  EXPECT_NE(error_of("9223372036854775807.9").find("whole number"), std::string::npos);
  EXPECT_NE(error_of("8388607.9999999999999TiB").find("larger than"), std::string::npos);
}

TEST(Bytes, FormatsWithBinaryUnitsAndThreeSignificantDigits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(812), "812 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(10240), "10.0 KiB");
  EXPECT_EQ(format_bytes(12582912), "12.0 MiB");
  EXPECT_EQ(format_bytes(536870912), "512.0 MiB");
  EXPECT_EQ(format_bytes(1610612736), "1.50 GiB");
  EXPECT_EQ(format_bytes(1599875154), "1.49 GiB");
  EXPECT_EQ(format_bytes(2199023255552), "2.00 TiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::max()), "8.00 EiB");
  EXPECT_EQ(format_bytes(-1536), "-1.50 KiB");
  EXPECT_EQ(format_bytes(-812), "-812 B");
}

TEST(Bytes, FormatAndParseAgree) {
  for (const char* text : {"1.50 GiB", "512.0 MiB", "64.0 KiB", "812 B"})
    EXPECT_EQ(format_bytes(parse_bytes(text, "f")), text);
}

}  // namespace
}  // namespace bigbatch
