// TextTable: column widths are measured over all rows before anything is printed.
#include "report/text_table.h"

#include <algorithm>

namespace mixpar {

TextTable::TextTable(std::vector<std::string> header, int indent) : indent_(indent) {
  rows_.push_back(std::move(header));
}

TextTable& TextTable::add(std::vector<std::string> row) {
  rows_.push_back(std::move(row));
  return *this;
}

std::string TextTable::str() const {
  std::vector<std::size_t> width;
  for (const auto& row : rows_) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line(static_cast<std::size_t>(indent_), ' ');
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      line += cell;
      if (c + 1 < width.size()) line += std::string(width[c] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();  // no trailing blanks
    out += line + "\n";
  }
  return out;
}

}  // namespace mixpar
