#include "ch01_round_bf16/round_bf16.h"

#include <bit>
#include <cmath>

namespace mixpar::exercises {

std::uint16_t round_to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) {
    // Keep the sign and the exponent, force a mantissa bit: a quiet NaN.
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  // Half of the cut-off unit is 0x8000; minus 1 plus the last kept bit makes the exact tie go
  // to the even neighbour. A carry out of the mantissa moves to the next binade (or to inf).
  const std::uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

}  // namespace mixpar::exercises
