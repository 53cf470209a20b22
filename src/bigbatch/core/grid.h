// A plain-text grid: a header row and rows of cells in aligned columns, for benchmark results.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

/// Renders `rows` under `headers` with every column as wide as its widest cell, two spaces
/// between columns, a title line and '-' rules above and below the header and at the end.
/// Cells after the first are right-aligned (numbers line up). Rows shorter than the header are
/// padded with empty cells; longer rows are a std::invalid_argument. Usage:
///   std::cout << render_grid("bench", {"micro-batch", "peak"}, {{"8", "33.3 MiB"}});
std::string render_grid(const std::string& title, const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows);

}  // namespace bigbatch
