// Helpers of chapter 9's tests.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ch09_expert_parallel/moe_lesson.h"

namespace mixpar::ch09::testing {

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every claim of the section that is not a --bug's holds; each one a --bug breaks does not.
inline void expect_section_holds(const Section& s) {
  for (const Claim& c : s.claims) {
    if (c.broken_by.empty()) {
      EXPECT_TRUE(c.ok) << s.title << ": " << c.claim << " (measured " << c.measured << ")";
    } else {
      EXPECT_FALSE(c.ok) << s.title << ": " << c.claim << " holds under --bug " << c.broken_by;
    }
  }
}

// The claim of `s` whose text starts with `prefix`.
inline const Claim& claim_of(const Section& s, const std::string& prefix) {
  for (const Claim& c : s.claims) {
    if (c.claim.rfind(prefix, 0) == 0) return c;
  }
  ADD_FAILURE() << s.title << " has no claim starting '" << prefix << "'";
  static const Claim none{};
  return none;
}

}  // namespace mixpar::ch09::testing
