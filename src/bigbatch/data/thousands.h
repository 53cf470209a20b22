// Digit grouping for the one-line dataset descriptions.
#pragma once

#include <cstdint>
#include <string>

namespace bigbatch::data {

/// Formats an integer with comma-separated thousands: 1234567 -> "1,234,567", -1000 -> "-1,000".
inline std::string group_thousands(int64_t value) {
  const bool negative = value < 0;
  // Work on the magnitude as unsigned so that INT64_MIN does not overflow.
  uint64_t magnitude = negative ? ~static_cast<uint64_t>(value) + 1 : static_cast<uint64_t>(value);
  std::string digits = std::to_string(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

}  // namespace bigbatch::data
