// A plain-text table of name / value / note rows, as printed for the plan at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

/// A titled table of rows with aligned columns. Usage:
///   Table t("plan");
///   t.add("global_batch", "64", "samples per optimizer step");
///   std::cout << t.render();
class Table {
 public:
  /// One row: a name, its value and an optional explanation.
  struct Row {
    std::string name;
    std::string value;
    std::string note;
  };

  explicit Table(std::string title) : title_(std::move(title)) {}

  /// Appends a row.
  void add(std::string name, std::string value, std::string note = "");
  /// Appends a section heading row that spans the table.
  void section(std::string heading);
  /// The rows so far, headings included (as rows with an empty value and note).
  const std::vector<Row>& rows() const { return rows_; }
  /// Renders with a frame of '-' lines and columns padded to their widest cell.
  std::string render() const;

 private:
  std::string title_;
  std::vector<Row> rows_;
};

/// Formats a number with engineering suffixes: 1234567 -> "1.23M".
std::string human_count(double value);
/// Formats a number with a fixed count of decimals: format_fixed(0.52910, 2) -> "0.53".
std::string format_fixed(double value, int decimals);
/// Formats an integer with comma-separated thousands: 1234567 -> "1,234,567", -1000 -> "-1,000".
std::string group_thousands(int64_t value);
/// Formats seconds as "1h02m", "3m05s" or "12s".
std::string human_duration(double seconds);

}  // namespace bigbatch
