#include "bigbatch/core/bytes.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "bigbatch/core/check.h"

namespace bigbatch {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::string lower(std::string text) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// Bytes per unit for a lower-case unit name, 0 if the unit is unknown.
int64_t unit_multiplier(const std::string& unit) {
  struct Unit {
    const char* name;
    int64_t bytes;
  };
  static const Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"kb", 1000},
      {"mb", 1000 * 1000},
      {"gb", int64_t{1000} * 1000 * 1000},
      {"tb", int64_t{1000} * 1000 * 1000 * 1000},
      {"kib", int64_t{1} << 10},
      {"mib", int64_t{1} << 20},
      {"gib", int64_t{1} << 30},
      {"tib", int64_t{1} << 40},
  };
  for (const Unit& u : kUnits)
    if (unit == u.name)
      return u.bytes;
  return 0;
}

[[noreturn]] void fail(const std::string& text, const std::string& field,
                       const std::string& reason) {
  throw InputError(cat(field, " = \"", text, "\" is not a byte size (", reason,
                       "); write a whole number of bytes (1048576), a binary size (64KiB, "
                       "512MiB, 1.5GiB, 2TiB: 1024^n bytes) or a decimal size (2KB, 2MB, 2GB, "
                       "2TB: 1000^n bytes); units are case-insensitive and may follow a space"));
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& field) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && is_space(text[begin]))
    ++begin;
  while (end > begin && is_space(text[end - 1]))
    --end;
  if (begin == end)
    fail(text, field, "it is empty");
  if (text[begin] == '-')
    fail(text, field, "it is negative");

  // Whole part, with an overflow check as digits accumulate.
  size_t pos = begin;
  int64_t whole = 0;
  const size_t whole_begin = pos;
  for (; pos < end && is_digit(text[pos]); ++pos) {
    const int digit = text[pos] - '0';
    if (whole > (kMax - digit) / 10)
      fail(text, field, "it is larger than 2^63 - 1 bytes");
    whole = whole * 10 + digit;
  }
  const bool has_whole = pos > whole_begin;

  // Fraction: up to 18 digits are kept (further digits are far below a byte).
  uint64_t numerator = 0;
  uint64_t denominator = 1;
  bool has_fraction = false;
  if (pos < end && text[pos] == '.') {
    ++pos;
    for (; pos < end && is_digit(text[pos]); ++pos) {
      has_fraction = true;
      if (denominator < 1000000000000000000ull) {
        numerator = numerator * 10 + static_cast<uint64_t>(text[pos] - '0');
        denominator *= 10;
      }
    }
    if (!has_fraction)
      fail(text, field, "a digit must follow the decimal point");
  }
  if (!has_whole && !has_fraction)
    fail(text, field, "it does not start with a number");

  while (pos < end && is_space(text[pos]))
    ++pos;
  const std::string unit = lower(text.substr(pos, end - pos));
  const int64_t multiplier = unit_multiplier(unit);
  if (multiplier == 0)
    fail(text, field, cat("unknown unit \"", text.substr(pos, end - pos), "\""));
  if (has_fraction && multiplier == 1 && numerator != 0)
    fail(text, field, "a count of bytes must be a whole number");

  if (whole > kMax / multiplier)
    fail(text, field, "it is larger than 2^63 - 1 bytes");
  int64_t bytes = whole * multiplier;
  // numerator < 10^18 and multiplier <= 2^40: the product is exact in long double up to 2^64,
  // and close enough beyond that to round to the nearest byte.
  const long double part = static_cast<long double>(numerator) * multiplier / denominator;
  const int64_t fraction_bytes = static_cast<int64_t>(std::llround(part));
  if (bytes > kMax - fraction_bytes)
    fail(text, field, "it is larger than 2^63 - 1 bytes");
  bytes += fraction_bytes;
  return bytes;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const bool negative = bytes < 0;
  // Through double: exact below 2^53, and |INT64_MIN| does not overflow.
  double value = std::fabs(static_cast<double>(bytes));
  int index = 0;
  while (value >= 1024.0 && index < 6) {
    value /= 1024.0;
    ++index;
  }
  char buffer[48];
  if (index == 0)
    std::snprintf(buffer, sizeof buffer, "%s%.0f B", negative ? "-" : "", value);
  else
    std::snprintf(buffer, sizeof buffer, "%s%.*f %s", negative ? "-" : "", value < 10.0 ? 2 : 1,
                  value, units[index]);
  return buffer;
}

}  // namespace bigbatch
