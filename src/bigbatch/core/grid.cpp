#include "bigbatch/core/grid.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace bigbatch {

std::string render_grid(const std::string& title, const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(headers.size(), 0);
  for (size_t c = 0; c < headers.size(); ++c)
    widths[c] = headers[c].size();
  for (const std::vector<std::string>& row : rows) {
    if (row.size() > headers.size()) {
      throw std::invalid_argument("render_grid: a row has " + std::to_string(row.size()) +
                                  " cells for " + std::to_string(headers.size()) + " columns");
    }
    for (size_t c = 0; c < row.size(); ++c)
      widths[c] = std::max(widths[c], row[c].size());
  }
  auto line_of = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < headers.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string padding(widths[c] - cell.size(), ' ');
      if (c > 0)
        line += "  ";
      line += c == 0 ? cell + padding : padding + cell;
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    return line;
  };
  size_t total = widths.empty() ? 0 : 2 * (widths.size() - 1);
  for (const size_t width : widths)
    total += width;
  total = std::max(total, title.size());
  const std::string rule(total, '-');
  std::ostringstream out;
  out << title << "\n" << rule << "\n" << line_of(headers) << "\n" << rule << "\n";
  for (const std::vector<std::string>& row : rows)
    out << line_of(row) << "\n";
  out << rule << "\n";
  return out.str();
}

}  // namespace bigbatch
