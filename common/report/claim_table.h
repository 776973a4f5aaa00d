// Claim and ClaimTable: every chapter demo ends with a "check | claim | expected | measured"
// table of what its lesson claims and what was measured; print() returns the number of
// surprises (a claim that failed unasked, or one a --bug should break that held) so a demo can
// exit non-zero when its lesson does not show what it says.
//
// The --bug convention of chapters 3-7: with `--bug NAME` a demo also measures the buggy run
// by the correctness claims the correct run passes ("replicas stay bit-identical", "ZeRO
// equals DDP"), each marked broken_by NAME. Those print "FAIL (expected)" -- the lesson is
// which claim the bug breaks and by how much -- and the closing line names them. The exit code
// stays 0 when exactly those fail, so a class script running every --bug does not stop; it is
// 1 when any other claim fails or an expected one holds (the bug no longer teaches its lesson).
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "report/format.h"
#include "report/text_table.h"

namespace mixpar {

// One claim of a lesson, with what was expected and what was measured.
struct Claim {
  std::string claim, expected, measured;
  bool ok = false;
  // Non-empty on a correctness claim measured on a buggy run: the --bug NAME expected to break
  // it. A table shows it only when it runs that bug.
  std::string broken_by = {};
};

// The two shapes most claims take: a yes/no fact, and a measured error within a tolerance.
inline Claim yes_claim(const std::string& claim, bool measured) {
  return {claim, "yes", measured ? "yes" : "no", measured};
}
inline Claim tolerance_claim(const std::string& claim, double measured, double tolerance) {
  return {claim, fmt("<= %.0e", tolerance), fmt("%.2e", measured), measured <= tolerance};
}

// `claim`, measured on the run with --bug `bug`, which that bug is expected to break.
inline Claim claim_broken_by(const std::string& bug, Claim claim) {
  claim.broken_by = bug;
  return claim;
}

class ClaimTable {
 public:
  ClaimTable() = default;
  // bug: the --bug NAME the demo runs; "", "all" and "none" run no single bug.
  explicit ClaimTable(std::string bug)
      : bug_(bug == "all" || bug == "none" ? std::string() : std::move(bug)) {}

  void add(const std::vector<Claim>& claims) {
    for (const Claim& k : claims) {
      if (!k.broken_by.empty() && k.broken_by != bug_) continue;
      if (k.broken_by.empty()) {
        table_.add({k.ok ? "ok" : "FAIL", k.claim, k.expected, k.measured});
        failures_ += k.ok ? 0 : 1;
        continue;
      }
      table_.add({k.ok ? "ok (expected FAIL)" : "FAIL (expected)", k.claim, k.expected,
                  k.measured});
      (k.ok ? held_ : broken_).push_back(k.claim);
    }
  }

  // Prints the table and what it means; returns the number of surprises (0: exit code 0).
  int print() const {
    std::printf("\n== Checks\n%s\n", table_.str().c_str());
    if (bug_.empty()) {
      std::printf("%s\n", failures_ == 0 ? "all claims hold"
                                         : fmt("%d claim(s) FAILED", failures_).c_str());
      return failures_;
    }
    if (!broken_.empty()) {
      std::printf("--bug %s breaks %zu claim(s), as expected: %s\n", bug_.c_str(), broken_.size(),
                  joined(broken_).c_str());
    }
    if (broken_.empty() && held_.empty()) {
      std::printf("--bug %s: no claim of this run is one the bug should break\n", bug_.c_str());
    }
    if (!held_.empty()) {
      std::printf("--bug %s was expected to break, but holds: %s\n", bug_.c_str(),
                  joined(held_).c_str());
    }
    if (failures_ > 0) std::printf("%d other claim(s) FAILED\n", failures_);
    // A --bug that marks no claim at all is one surprise; one whose marked claims held is
    // counted by held_ already.
    const bool marks_none = broken_.empty() && held_.empty();
    const int surprises = failures_ + static_cast<int>(held_.size()) + (marks_none ? 1 : 0);
    std::printf("%s\n", surprises == 0
                            ? "every other claim holds: the FAIL lines are the lesson (exit code 0)"
                            : "the bug does not show what the lesson says (exit code 1)");
    return surprises;
  }

 private:
  static std::string joined(const std::vector<std::string>& claims) {
    std::string out;
    for (const std::string& c : claims) out += (out.empty() ? "\"" : "; \"") + c + "\"";
    return out;
  }

  std::string bug_;
  TextTable table_{{"check", "claim", "expected", "measured"}};
  int failures_ = 0;
  std::vector<std::string> broken_, held_;  // this bug's claims that failed / held
};

}  // namespace mixpar
