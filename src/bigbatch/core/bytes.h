// Byte sizes as people write them ("1.5GiB", "512MB") and as bigbatch prints them ("1.50 GiB").
#pragma once

#include <cstdint>
#include <string>

namespace bigbatch {

/// Reads a byte size written by a user: a whole number of bytes ("1048576", "812B"), a binary
/// size ("64KiB", "512MiB", "1.5GiB", "2TiB": KiB = 1024 bytes, MiB = 1024^2, ...) or a decimal
/// size ("2KB", "2MB", "2GB", "2TB": KB = 1000 bytes, MB = 1000^2, ...). Units are
/// case-insensitive and may be separated from the number by spaces; a fractional size is rounded
/// to the nearest byte. Throws InputError naming `field` and `text` (and listing the accepted
/// forms) for an empty, negative, unreadable or too large (> INT64_MAX bytes) size.
int64_t parse_bytes(const std::string& text, const std::string& field);

/// Formats a byte count with binary units: 812 -> "812 B", 1536 -> "1.50 KiB",
/// 536870912 -> "512.0 MiB", 1610612736 -> "1.50 GiB". Below 10 units two decimals are shown,
/// from 10 units on one (at least three significant digits); negative counts get a '-'.
std::string format_bytes(int64_t bytes);

}  // namespace bigbatch
