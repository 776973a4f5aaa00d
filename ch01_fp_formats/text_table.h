// TextTable: rows of strings printed as aligned columns, so every table of the lesson (and
// of fpx) lines up whatever the numbers turn out to be. Columns are left-aligned and
// separated by two spaces; each line gets `indent` leading spaces.
#pragma once

#include <string>
#include <vector>

namespace mixpar::ch01 {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header, int indent = 2);
  TextTable& add(std::vector<std::string> row);  // shorter rows are padded with ""
  std::string str() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
  int indent_;
};

// printf into a std::string: fmt("%.2f%%", 12.5) == "12.50%".
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace mixpar::ch01
