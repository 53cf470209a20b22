#include "bigbatch/core/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace bigbatch {

void Table::add(std::string name, std::string value, std::string note) {
  rows_.push_back({std::move(name), std::move(value), std::move(note)});
}

void Table::section(std::string heading) {
  rows_.push_back({"[" + heading + "]", "", ""});
}

std::string Table::render() const {
  size_t name_width = 0;
  size_t value_width = 0;
  for (const Row& row : rows_) {
    if (!row.value.empty() || !row.note.empty())
      name_width = std::max(name_width, row.name.size());
    if (!row.note.empty())
      value_width = std::max(value_width, row.value.size());
  }
  std::ostringstream out;
  size_t line_width = title_.size();
  std::vector<std::string> lines;
  for (const Row& row : rows_) {
    std::string line = row.name;
    if (!row.value.empty() || !row.note.empty()) {
      line.resize(name_width, ' ');
      line += "  " + row.value;
      if (!row.note.empty()) {
        line.resize(name_width + 2 + value_width, ' ');
        line += "  " + row.note;
      }
    }
    line_width = std::max(line_width, line.size());
    lines.push_back(std::move(line));
  }
  const std::string rule(line_width, '-');
  out << title_ << "\n" << rule << "\n";
  for (const std::string& line : lines)
    out << line << "\n";
  out << rule << "\n";
  return out.str();
}

std::string human_count(double value) {
  const char* suffixes[] = {"", "k", "M", "G", "T"};
  int index = 0;
  double scaled = value;
  while (std::fabs(scaled) >= 1000.0 && index < 4) {
    scaled /= 1000.0;
    ++index;
  }
  char buffer[32];
  if (index == 0) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", scaled);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.*f%s", std::fabs(scaled) < 10 ? 2 : 1, scaled,
                  suffixes[index]);
  }
  return buffer;
}

std::string format_fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  const long total = std::lround(seconds);
  char buffer[32];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%ldh%02ldm", total / 3600, (total % 3600) / 60);
  } else if (total >= 60) {
    std::snprintf(buffer, sizeof(buffer), "%ldm%02lds", total / 60, total % 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lds", total);
  }
  return buffer;
}

std::string group_thousands(int64_t value) {
  const bool negative = value < 0;
  // Work on the magnitude as unsigned so that INT64_MIN does not overflow.
  const uint64_t magnitude =
      negative ? ~static_cast<uint64_t>(value) + 1 : static_cast<uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

}  // namespace bigbatch
