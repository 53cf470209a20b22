// Facts about the machine from Linux's /proc files, parsed from their text, and the process's
// environment variables.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace bigbatch {

/// The feature flags of the first processor in /proc/cpuinfo's text ("avx2", "avx512_bf16",
/// "amx_bf16", ...); empty when there is no "flags" line.
std::set<std::string> parse_cpu_flags(std::string_view cpuinfo);

/// The feature flags of this machine's CPU: parse_cpu_flags of /proc/cpuinfo, read on the first
/// call; empty where the file cannot be read.
const std::set<std::string>& this_cpu_flags();

/// The "model name" of the first processor in /proc/cpuinfo's text; empty when there is none.
std::string parse_cpu_model(std::string_view cpuinfo);

/// The "vendor_id" of the first processor in /proc/cpuinfo's text ("AuthenticAMD",
/// "GenuineIntel", ...); empty when there is none.
std::string parse_cpu_vendor(std::string_view cpuinfo);

/// This machine's parse_cpu_vendor of /proc/cpuinfo, read on the first call; empty where the file
/// cannot be read.
const std::string& this_cpu_vendor();

/// Memory of the machine, from /proc/meminfo.
struct MemoryInfo {
  int64_t total_bytes = 0;      ///< MemTotal
  int64_t available_bytes = 0;  ///< MemAvailable: what can be allocated without swapping
};

/// Reads MemTotal and MemAvailable (kB) from /proc/meminfo's text; 0 for a missing field.
MemoryInfo parse_meminfo(std::string_view meminfo);

/// The value of environment variable `name` (possibly empty); nullopt where it is unset.
std::optional<std::string> environment_variable(const char* name);

}  // namespace bigbatch
