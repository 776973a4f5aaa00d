// Claim and ClaimTable: every chapter demo ends with a "check | claim | expected | measured"
// table of what its lesson claims and what was measured; print() returns the number of failed
// claims so a demo can exit non-zero when the lesson's claim does not hold.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "report/format.h"
#include "report/text_table.h"

namespace mixpar {

// One claim of a lesson, with what was expected and what was measured.
struct Claim {
  std::string claim, expected, measured;
  bool ok = false;
};

// The two shapes most claims take: a yes/no fact, and a measured error within a tolerance.
inline Claim yes_claim(const std::string& claim, bool measured) {
  return {claim, "yes", measured ? "yes" : "no", measured};
}
inline Claim tolerance_claim(const std::string& claim, double measured, double tolerance) {
  return {claim, fmt("<= %.0e", tolerance), fmt("%.2e", measured), measured <= tolerance};
}

class ClaimTable {
 public:
  void add(const std::vector<Claim>& claims) {
    for (const Claim& k : claims) {
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

}  // namespace mixpar
