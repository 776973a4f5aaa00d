// TextTable: rows of strings printed as aligned columns, so every table of a demo or tool
// lines up whatever the numbers turn out to be. Columns are left-aligned and separated by two
// spaces; each line gets `indent` leading spaces.
#pragma once

#include <string>
#include <vector>

namespace mixpar {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header, int indent = 2);
  TextTable& add(std::vector<std::string> row);  // shorter rows are padded with ""
  std::string str() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
  int indent_;
};

}  // namespace mixpar
