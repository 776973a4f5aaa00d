// Sizes derived from what a user typed (batch x sequence x accumulation x ranks, a model's
// shape) are products of numbers nobody bounded: in plain int64 arithmetic a large enough
// flag wraps to a negative or zero size, which surfaces much later as a division by zero or a
// "negative tokens/step". Every such product is formed here, and an overflow is an InputError
// naming the product and its factors.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "util/errors.h"

namespace mixpar {

// One factor of a checked product: what it is ("--batch", "" for a constant) and its value.
using SizeFactor = std::pair<std::string_view, std::int64_t>;

// The product of `factors`; InputError "<what>: --batch 4611686018427387904 x --seq 64
// overflows a 64-bit integer" when it does not fit an int64 (or a factor is negative).
inline std::int64_t checked_product(std::string_view what, std::initializer_list<SizeFactor> factors) {
  std::int64_t p = 1;
  bool overflow = false;
  for (const auto& [name, v] : factors) {
    if (v < 0 || __builtin_mul_overflow(p, v, &p)) {
      overflow = true;
      break;
    }
  }
  if (!overflow) return p;
  std::string terms;
  for (const auto& [name, v] : factors) {
    if (!terms.empty()) terms += " x ";
    if (!name.empty()) terms += std::string(name) + " ";
    terms += std::to_string(v);
  }
  throw InputError(std::string(what) + ": " + terms + " overflows a 64-bit integer");
}

// a + b; InputError naming `what` when the sum does not fit an int64.
inline std::int64_t checked_sum(std::string_view what, std::int64_t a, std::int64_t b) {
  std::int64_t s = 0;
  if (__builtin_add_overflow(a, b, &s)) {
    throw InputError(std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) +
                     " overflows a 64-bit integer");
  }
  return s;
}

}  // namespace mixpar
