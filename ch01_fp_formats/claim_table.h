// ClaimTable: the "check | claim | expected | measured" table every chapter demo ends with.
// Works on any claim type with fields ok, claim, expected, measured; print() returns the number
// of failed claims so a demo can exit non-zero when the lesson's claim does not hold.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ch01_fp_formats/text_table.h"

namespace mixpar::ch01 {

template <class ClaimT> class ClaimTable {
 public:
  void add(const std::vector<ClaimT>& claims) {
    for (const ClaimT& k : claims) {
      table_.add({k.ok ? "ok" : "FAIL", k.claim, k.expected, k.measured});
      failures_ += k.ok ? 0 : 1;
    }
  }
  int print() const {
    std::printf("\n== Checks\n%s\n%s\n", table_.str().c_str(),
                failures_ == 0 ? "all claims hold" : fmt("%d claim(s) FAILED", failures_).c_str());
    return failures_;
  }

 private:
  TextTable table_{{"check", "claim", "expected", "measured"}};
  int failures_ = 0;
};

}  // namespace mixpar::ch01
