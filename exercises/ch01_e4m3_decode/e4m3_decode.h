// Exercise (chapter 1): decode an FP8 E4M3 byte (the OCP 8-bit floating point specification's
// E4M3, "E4M3FN": what NVIDIA's Hopper and Transformer Engine call float8_e4m3fn) to the FP32
// value it stands for. 1 sign, 4 exponent bits (bias 7), 3 mantissa bits:
//   - exponent field 1..15: normal, (-1)^s x 2^(e - 7) x (1 + m/8);
//   - exponent field 0: subnormal, (-1)^s x 2^(1 - 7) x (m/8), zero included (and -0);
//   - E4M3 has no infinities: it gives them up for range, so exponent 15 is an ordinary binade
//     up to 448 = 2^8 x 1.75, and only S.1111.111 (0x7f, 0xff) is NaN.
// Every E4M3 value is exact in FP32. See ch01_fp_formats/README.md (the FP8 formats) and
// docs/REFERENCE.md; the tests compare with common/numerics/formats.h (e4m3_bits_to_float).
#pragma once

#include <cstdint>

namespace mixpar::exercises {

float decode_e4m3(std::uint8_t bits);

}  // namespace mixpar::exercises
