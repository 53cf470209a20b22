// Reading TensorBoard event files in tests without the code under test: a bitwise CRC-32C written
// out here and `protoc --decode_raw` (Debian's protobuf-compiler) as the protobuf decoder.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/test_support.h"

namespace bigbatch::testing {

/// CRC-32C, bit by bit: reflected Castagnoli polynomial 0x82F63B78, initial value and final XOR
/// 0xFFFFFFFF.
inline uint32_t bitwise_crc32c(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (const char c : data) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/// TFRecord's masking of a CRC.
inline uint32_t mask_crc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline uint64_t little_endian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;)
    value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

/// The data of every record of an event file, each length and both CRCs of every record checked
/// (a failure names the record). A truncated record fails the test.
inline std::vector<std::string> read_tfevents(const std::filesystem::path& path) {
  const std::string file = read_file(path);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    const std::string where = path.string() + " record " + std::to_string(records.size());
    if (file.size() - at < 12) {
      ADD_FAILURE() << where << ": truncated header";
      break;
    }
    const std::string_view header(file.data() + at, 8);
    const uint64_t length = little_endian(header);
    EXPECT_EQ(little_endian(std::string_view(file.data() + at + 8, 4)),
              mask_crc(bitwise_crc32c(header)))
        << where << ": length CRC";
    if (file.size() - at - 12 < length + 4) {
      ADD_FAILURE() << where << ": truncated data";
      break;
    }
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(little_endian(std::string_view(file.data() + at + 12 + length, 4)),
              mask_crc(bitwise_crc32c(data)))
        << where << ": data CRC";
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

/// The text `protoc --decode_raw` prints for `message` (empty, and a test failure, when protoc is
/// missing or fails).
inline std::string decode_raw(const std::string& message) {
  if (std::system("command -v protoc >/dev/null 2>&1") != 0) {
    ADD_FAILURE() << "protoc not found: apt-get install protobuf-compiler (scripts/setup does)";
    return "";
  }
  const TempDir dir;
  const std::filesystem::path input = dir.write("message.bin", message);
  const std::string command = "protoc --decode_raw < '" + input.string() + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    text.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << text;
  return text;
}

/// What protoc found in one Event.
struct DecodedEvent {
  std::string text;                      ///< protoc's output
  bool has_wall_time = false;            ///< field 1, a 64-bit value
  double wall_time = 0.0;                ///< its value
  int64_t step = 0;                      ///< field 2 (0 when absent)
  std::string file_version;              ///< field 3
  std::map<std::string, float> scalars;  ///< summary (5): value (1) tag (1) -> simple_value (2)
  int64_t session_status = 0;            ///< session_log (7) status (1); 0 when absent
};

/// Decodes an Event with protoc --decode_raw and reads its fields by number (event.proto).
inline DecodedEvent decode_event(const std::string& message) {
  DecodedEvent event;
  event.text = decode_raw(message);
  std::istringstream lines(event.text);
  std::vector<std::string> path;  // field numbers of the open sub-messages
  std::string tag;
  for (std::string line; std::getline(lines, line);) {
    line.erase(0, line.find_first_not_of(' '));
    if (line == "}") {
      path.pop_back();
      continue;
    }
    if (line.size() > 2 && line.compare(line.size() - 2, 2, " {") == 0) {
      path.push_back(line.substr(0, line.size() - 2));
      continue;
    }
    const size_t colon = line.find(": ");
    if (colon == std::string::npos)
      continue;
    const std::string field = line.substr(0, colon);
    const std::string value = line.substr(colon + 2);
    std::string where;
    for (const std::string& p : path)
      where += p + ".";
    where += field;
    if (where == "1") {
      const uint64_t bits = std::stoull(value, nullptr, 16);
      std::memcpy(&event.wall_time, &bits, sizeof(bits));
      event.has_wall_time = true;
    } else if (where == "2") {
      event.step = std::stoll(value);
    } else if (where == "3") {
      event.file_version = value.substr(1, value.size() - 2);
    } else if (where == "5.1.1") {
      tag = value.substr(1, value.size() - 2);
    } else if (where == "5.1.2") {
      const uint32_t bits = static_cast<uint32_t>(std::stoul(value, nullptr, 16));
      float f = 0;
      std::memcpy(&f, &bits, sizeof(bits));
      event.scalars[tag] = f;
    } else if (where == "7.1") {
      event.session_status = std::stoll(value);
    }
  }
  return event;
}

/// Every event of an event file, decoded (records checked as read_tfevents does).
inline std::vector<DecodedEvent> decode_tfevents(const std::filesystem::path& path) {
  std::vector<DecodedEvent> events;
  for (const std::string& record : read_tfevents(path))
    events.push_back(decode_event(record));
  return events;
}

/// The event files (events.out.tfevents.*) in `directory`, sorted by name.
inline std::vector<std::filesystem::path> event_files(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  for (const auto& item : std::filesystem::directory_iterator(directory)) {
    if (item.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(item.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace bigbatch::testing
