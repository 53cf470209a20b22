#include "bigbatch/core/system_info.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace bigbatch {

namespace {

/// The value after "key<spaces>:" on the first line that starts with `key`; empty if none.
std::string field(std::string_view text, std::string_view key) {
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, key.size(), key) != 0)
      continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon)
      continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

int64_t kilobytes(std::string_view text, std::string_view key) {
  const std::string value = field(text, key);
  try {
    return value.empty() ? 0 : std::stoll(value) * 1024;
  } catch (const std::exception&) {
    return 0;
  }
}

/// /proc/cpuinfo's text; empty where it cannot be read.
std::string this_cpuinfo() {
  std::ifstream file("/proc/cpuinfo");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

std::set<std::string> parse_cpu_flags(std::string_view cpuinfo) {
  std::istringstream words(field(cpuinfo, "flags"));
  std::set<std::string> flags;
  for (std::string word; words >> word;)
    flags.insert(word);
  return flags;
}

const std::set<std::string>& this_cpu_flags() {
  static const std::set<std::string> flags = parse_cpu_flags(this_cpuinfo());
  return flags;
}

std::string parse_cpu_model(std::string_view cpuinfo) {
  return field(cpuinfo, "model name");
}

std::string parse_cpu_vendor(std::string_view cpuinfo) {
  return field(cpuinfo, "vendor_id");
}

const std::string& this_cpu_vendor() {
  static const std::string vendor = parse_cpu_vendor(this_cpuinfo());
  return vendor;
}

MemoryInfo parse_meminfo(std::string_view meminfo) {
  return {kilobytes(meminfo, "MemTotal"), kilobytes(meminfo, "MemAvailable")};
}

std::optional<std::string> environment_variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

}  // namespace bigbatch
