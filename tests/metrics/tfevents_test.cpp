// Event-file records and Event messages, read back with an independent CRC-32C and protoc.
#include "bigbatch/metrics/tfevents.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <random>

#include "metrics/tfevents_decoder.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

TEST(TfEvents, Crc32cMatchesTheCheckValueAndABitwiseImplementation) {
  EXPECT_EQ(metrics::crc32c("123456789"), 0xe3069283u);  // the CRC-32C check value
  EXPECT_EQ(testing::bitwise_crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(metrics::crc32c(""), 0u);
  std::mt19937 rng(7);
  for (const size_t size : {1, 7, 8, 63, 64, 1000, 4099}) {
    std::string data(size, '\0');
    for (char& c : data)
      c = static_cast<char>(rng());
    EXPECT_EQ(metrics::crc32c(data), testing::bitwise_crc32c(data)) << size;
    EXPECT_EQ(metrics::masked_crc32c(data), testing::mask_crc(testing::bitwise_crc32c(data)));
  }
}

TEST(TfEvents, RecordFramesDataWithLengthAndMaskedCrcs) {
  const testing::TempDir dir;
  const std::string data = "any bytes \x01\x02";
  const fs::path file = dir.write(
      "records", metrics::tfevents_record(data) + metrics::tfevents_record(std::string(300, 'x')));
  const std::vector<std::string> records = testing::read_tfevents(file);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0], data);
  EXPECT_EQ(records[1], std::string(300, 'x'));
}

TEST(TfEvents, EventsDecodeWithProtoc) {
  const testing::DecodedEvent version = testing::decode_event(metrics::file_version_event(1.5e9));
  EXPECT_EQ(version.file_version, "brain.Event:2") << version.text;
  EXPECT_TRUE(version.has_wall_time);
  EXPECT_EQ(version.wall_time, 1.5e9);
  EXPECT_EQ(version.step, 0);

  const testing::DecodedEvent scalars = testing::decode_event(metrics::scalars_event(
      1700000000.25, 300, {{"train/loss", 2.5}, {"memory/peak_mib", 1.0 / 3.0}, {"lr", 3e-4}}));
  EXPECT_EQ(scalars.wall_time, 1700000000.25) << scalars.text;
  EXPECT_EQ(scalars.step, 300);  // a two-byte varint
  ASSERT_EQ(scalars.scalars.size(), 3u) << scalars.text;
  EXPECT_EQ(scalars.scalars.at("train/loss"), 2.5f);
  EXPECT_EQ(scalars.scalars.at("memory/peak_mib"), static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(scalars.scalars.at("lr"), 3e-4f);

  const testing::DecodedEvent start = testing::decode_event(metrics::session_start_event(2.0, 41));
  EXPECT_EQ(start.step, 41) << start.text;
  EXPECT_EQ(start.session_status, 1);  // SessionLog.START
}

TEST(TfEvents, WriterNamesTheFileAfterTimeAndHostAndNeverReusesOne) {
  const testing::TempDir dir;
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const double before = metrics::wall_time_now();
  metrics::EventFileWriter first(dir.path().string());
  metrics::EventFileWriter second(dir.path().string());  // most likely the same second
  EXPECT_NE(first.path(), second.path());
  const std::string name = fs::path(first.path()).filename().string();
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const size_t dot = name.find('.', prefix.size());
  const int64_t seconds = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  EXPECT_GE(seconds, static_cast<int64_t>(before));
  EXPECT_LE(seconds, static_cast<int64_t>(metrics::wall_time_now()));
  EXPECT_EQ(name.substr(dot + 1), host);

  first.write(metrics::scalars_event(3.0, 7, {{"x", 1.0}}));
  const std::vector<std::string> records = testing::read_tfevents(first.path());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(testing::decode_event(records[0]).file_version, "brain.Event:2");
  EXPECT_EQ(testing::decode_event(records[1]).scalars.at("x"), 1.0f);
}

TEST(TfEvents, WriterNamesTheDirectoryItCannotWriteTo) {
  try {
    metrics::EventFileWriter writer("/nonexistent-bigbatch-dir");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent-bigbatch-dir/events.out.tfevents."),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace bigbatch
