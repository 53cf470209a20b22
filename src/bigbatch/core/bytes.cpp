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

/// The number at the front of a byte size: whole part and fraction numerator / denominator.
struct LeadingNumber {
  int64_t whole = 0;
  uint64_t numerator = 0;
  uint64_t denominator = 1;
  bool has_fraction = false;
  size_t end = 0;  ///< where the number stops in the text
};

/// Reads digits[.digits] from text[begin, end); fails unless a digit is there.
LeadingNumber read_number(const std::string& text, size_t begin, size_t end,
                          const std::string& field) {
  LeadingNumber number;
  size_t pos = begin;
  for (; pos < end && is_digit(text[pos]); ++pos) {  // overflow checked as digits accumulate
    const int digit = text[pos] - '0';
    if (number.whole > (kMax - digit) / 10)
      fail(text, field, "it is larger than 2^63 - 1 bytes");
    number.whole = number.whole * 10 + digit;
  }
  const bool has_whole = pos > begin;
  if (pos < end && text[pos] == '.') {
    ++pos;
    for (; pos < end && is_digit(text[pos]); ++pos) {
      number.has_fraction = true;
      if (number.denominator < 1000000000000000000ull) {  // 18 digits: far below a byte
        number.numerator = number.numerator * 10 + static_cast<uint64_t>(text[pos] - '0');
        number.denominator *= 10;
      }
    }
    if (!number.has_fraction)
      fail(text, field, "a digit must follow the decimal point");
  }
  if (!has_whole && !number.has_fraction)
    fail(text, field, "it does not start with a number");
  number.end = pos;
  return number;
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
  const LeadingNumber number = read_number(text, begin, end, field);
  size_t pos = number.end;
  while (pos < end && is_space(text[pos]))
    ++pos;
  const int64_t multiplier = unit_multiplier(lower(text.substr(pos, end - pos)));
  if (multiplier == 0)
    fail(text, field, cat("unknown unit \"", text.substr(pos, end - pos), "\""));
  if (number.has_fraction && multiplier == 1 && number.numerator != 0)
    fail(text, field, "a count of bytes must be a whole number");
  if (number.whole > kMax / multiplier)
    fail(text, field, "it is larger than 2^63 - 1 bytes");
  // numerator < 10^18 and multiplier <= 2^40: the product is exact in long double up to 2^64,
  // and close enough beyond that to round to the nearest byte.
  const long double part =
      static_cast<long double>(number.numerator) * multiplier / number.denominator;
  const int64_t fraction_bytes = static_cast<int64_t>(std::llround(part));
  const int64_t bytes = number.whole * multiplier;
  if (bytes > kMax - fraction_bytes)
    fail(text, field, "it is larger than 2^63 - 1 bytes");
  return bytes + fraction_bytes;
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
