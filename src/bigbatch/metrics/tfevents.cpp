#include "bigbatch/metrics/tfevents.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace bigbatch::metrics {

namespace {

// Protocol-buffer wire format, only what Event needs: varints (wire type 0), 64-bit (1),
// length-delimited (2) and 32-bit (5) fields. Field numbers from TensorFlow's event.proto and
// summary.proto.
constexpr int kEventWallTime = 1;     // double
constexpr int kEventStep = 2;         // int64
constexpr int kEventFileVersion = 3;  // string
constexpr int kEventSummary = 5;      // Summary
constexpr int kEventSessionLog = 7;   // SessionLog
constexpr int kSummaryValue = 1;      // repeated Summary.Value
constexpr int kValueTag = 1;          // string
constexpr int kValueSimpleValue = 2;  // float
constexpr int kSessionLogStatus = 1;  // enum SessionStatus
constexpr uint64_t kSessionStart = 1;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out += static_cast<char>((value >> (8 * i)) & 0xff);
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void put_varint_field(std::string& out, int field, uint64_t value) {
  put_tag(out, field, 0);
  put_varint(out, value);
}

void put_double_field(std::string& out, int field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_tag(out, field, 1);
  put_little_endian(out, bits, 8);
}

void put_float_field(std::string& out, int field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_tag(out, field, 5);
  put_little_endian(out, bits, 4);
}

void put_bytes_field(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

/// An Event's wall_time and step, the fields every event starts with.
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_double_field(event, kEventWallTime, wall_time);
  if (step != 0)
    put_varint_field(event, kEventStep, static_cast<uint64_t>(step));
  return event;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0')
    return "localhost";
  return name;
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error("cannot " + what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  // ISA-L's crc32_iscsi neither inverts the initial value nor the result.
  auto* bytes = reinterpret_cast<unsigned char*>(const_cast<char*>(data.data()));
  return ~crc32_iscsi(bytes, static_cast<int>(data.size()), 0xffffffffu);
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfevents_record(std::string_view data) {
  std::string record;
  put_little_endian(record, data.size(), 8);
  put_little_endian(record, masked_crc32c(record), 4);
  record.append(data);
  put_little_endian(record, masked_crc32c(data), 4);
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes_field(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& scalar : scalars) {
    std::string value;
    put_bytes_field(value, kValueTag, scalar.tag);
    put_float_field(value, kValueSimpleValue, static_cast<float>(scalar.value));
    put_bytes_field(summary, kSummaryValue, value);
  }
  std::string event = event_header(wall_time, step);
  put_bytes_field(event, kEventSummary, summary);
  return event;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_varint_field(session_log, kSessionLogStatus, kSessionStart);
  std::string event = event_header(wall_time, step);
  put_bytes_field(event, kEventSessionLog, session_log);
  return event;
}

double wall_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

EventFileWriter::EventFileWriter(const std::string& directory) {
  const double now = wall_time_now();
  const std::string base = directory + "/events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(now)) + "." + host_name();
  path_ = base;
  for (int suffix = 2;; ++suffix) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0)
      break;
    if (errno != EEXIST)
      fail("create", path_);
    path_ = base + "." + std::to_string(suffix);
  }
  write(file_version_event(now));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0)
    ::close(fd_);
}

void EventFileWriter::write(std::string_view event) {
  const std::string record = tfevents_record(event);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail("write", path_);
    done += static_cast<size_t>(n);
  }
}

}  // namespace bigbatch::metrics
