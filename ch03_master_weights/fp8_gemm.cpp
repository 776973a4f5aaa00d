// FP8 GEMM emulation (fp8_gemm.h). The project compiles with -ffp-contract=off
// (cmake/MixparIsa.cmake): an FMA would round a promotion's multiply-add once, not twice.
#include "fp8_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "numerics/formats.h"
#include "util/errors.h"

namespace mixpar::fp8 {
namespace {

float decode(std::uint8_t code, DType format) {
  return format == DType::kE4M3 ? e4m3_bits_to_float(code) : e5m2_bits_to_float(code);
}

// The chunk length along K and whether scales are applied per chunk, checked against the
// operands' tiles.
struct Plan {
  std::int64_t chunk = 0;
  bool scale_per_chunk = false;
};

Plan plan(const Fp8Matrix& a, const Fp8Matrix& b, const GemmConfig& c) {
  if (a.cols != b.cols) {
    throw InputError("FP8 GEMM: A has K = " + std::to_string(a.cols) + ", B has K = " +
                     std::to_string(b.cols));
  }
  if (c.promote_every < 0) throw InputError("FP8 GEMM: promote_every must be >= 0");
  Plan p;
  p.chunk = c.promote_every == 0 ? a.cols : std::min(c.promote_every, a.cols);
  p.scale_per_chunk = a.tile_cols < a.cols || b.tile_cols < b.cols;
  for (const Fp8Matrix* m : {&a, &b}) {
    if (m->tile_cols < m->cols && (c.promote_every == 0 || m->tile_cols % p.chunk != 0)) {
      throw InputError("FP8 GEMM: tiles of " + std::to_string(m->tile_cols) +
                       " along K need promotion every " + std::to_string(m->tile_cols) +
                       " elements or a divisor of it");
    }
  }
  return p;
}

// Adds product p to the 14-bit accumulator s exactly, then truncates toward zero. hi + lo is
// the exact sum (Knuth's TwoSum); when hi sits on the 14-bit grid but the exact sum is just
// inside it (lo pulls toward zero), truncation lands on the grid point below.
double add_truncated(double s, double p, int bits) {
  const double hi = s + p;
  const double bb = hi - s;
  const double lo = (s - (hi - bb)) + (p - bb);
  const double t = truncate_to_bits(hi, bits);
  if (lo == 0 || t != hi || (lo < 0) == (hi < 0)) return t;
  int e = 0;
  const double f = std::frexp(std::fabs(hi), &e);  // |hi| = f * 2^e, f in [0.5, 1)
  // Grid spacing just below |hi|: 2^(e-bits) inside the binade, half that at its bottom.
  const double step = std::ldexp(1.0, f == 0.5 ? e - 1 - bits : e - bits);
  return hi < 0 ? hi + step : hi - step;
}

// Truncation toward zero to 14 significant bits of a normal double (or zero): clear the 39
// fraction bits below the top 13. Used where every running sum is exact in double.
double truncate14_bits(double x) {
  static_assert(kTensorCoreAccumulatorBits == 14);
  constexpr std::uint64_t kKeep = ~((std::uint64_t{1} << 39) - 1);
  return std::bit_cast<double>(std::bit_cast<std::uint64_t>(x) & kKeep);
}

// Whether s + p is exact in double for every running sum of a chunk: products are multiples
// of the two formats' smallest subnormals' product and at most chunk x max_a x max_b.
bool sums_exact_in_double(const Fp8Matrix& a, const Fp8Matrix& b, std::int64_t chunk) {
  const auto min_exp = [](DType f) { return f == DType::kE4M3 ? -9 : -16; };
  const double span = std::log2(double(chunk)) + std::log2(double(fp8_max(a.format))) +
                      std::log2(double(fp8_max(b.format))) - min_exp(a.format) -
                      min_exp(b.format);
  return span <= 52;
}

// Promotion: a partial sum into the FP32 total (scaled first when scales change along K).
float promote(float total, float partial, float dequant, bool scale_per_chunk) {
  if (!scale_per_chunk) return total + partial;
  const float scaled = partial * dequant;
  return total + scaled;
}

float dequant_of(const Fp8Matrix& a, const Fp8Matrix& b, std::int64_t m, std::int64_t n,
                 std::int64_t k) {
  return a.scale_inv[static_cast<std::size_t>(a.tile_index(m, k))] *
         b.scale_inv[static_cast<std::size_t>(b.tile_index(n, k))];
}

std::vector<float> decoded(const Fp8Matrix& m) {
  std::vector<float> out(m.codes.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = decode(m.codes[i], m.format);
  return out;
}

// The reference's exact representation of an FP8 value: v * 2^16, an integer for both
// formats (E5M2's smallest subnormal is 2^-16, E4M3's 2^-9), so products are in 2^-32 units.
std::vector<std::int64_t> fixed_values(const Fp8Matrix& m) {
  std::vector<std::int64_t> out(m.codes.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::int64_t>(std::ldexp(double(decode(m.codes[i], m.format)), 16));
  }
  return out;
}

// 128-bit integers (a GCC and clang extension; __extension__ keeps -Wpedantic quiet).
__extension__ typedef __int128 Fixed;
__extension__ typedef unsigned __int128 UFixed;

int bit_length(UFixed v) {
  const auto hi = static_cast<std::uint64_t>(v >> 64), lo = static_cast<std::uint64_t>(v);
  return hi != 0 ? 128 - std::countl_zero(hi) : 64 - std::countl_zero(lo);
}

// v (units of 2^-32) rounded to `bits` significant bits, to nearest even or toward zero, by
// integer arithmetic alone (the reference's own rounding, independent of the FPU).
Fixed round_fixed(Fixed v, int bits, bool toward_zero) {
  const bool neg = v < 0;
  UFixed m = static_cast<UFixed>(neg ? -v : v);
  const int len = bit_length(m);
  if (len <= bits) return v;
  const int shift = len - bits;
  UFixed q = m >> shift;
  const UFixed rem = m & ((static_cast<UFixed>(1) << shift) - 1);
  const UFixed half = static_cast<UFixed>(1) << (shift - 1);
  if (!toward_zero && (rem > half || (rem == half && (q & 1) != 0))) ++q;
  const Fixed r = static_cast<Fixed>(q << shift);
  return neg ? -r : r;
}

// The exact value of a fixed-point number that has at most 53 significant bits.
double fixed_to_double(Fixed v) {
  const bool neg = v < 0;
  UFixed m = static_cast<UFixed>(neg ? -v : v);
  const int shift = std::max(0, bit_length(m) - 53);
  const double d = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(m >> shift)),
                              shift - 32);
  return neg ? -d : d;
}

}  // namespace

GemmConfig recipe_gemm(Recipe r) {
  if (r == Recipe::kBlockwise) return {Accumulator::kTensorCore14, kPromotionInterval};
  return {Accumulator::kFp32, 0};
}

double truncate_to_bits(double x, int bits) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double up = std::ldexp(1.0, bits - e);
  return std::trunc(x * up) / up;
}

std::vector<float> gemm(const Fp8Matrix& a, const Fp8Matrix& b, const GemmConfig& config) {
  const Plan p = plan(a, b, config);
  const std::vector<float> av = decoded(a), bv = decoded(b);
  const std::int64_t k_total = a.cols, n_total = b.rows;
  // B as [K][N]: the inner loop runs over N, one running sum per output (each in its own
  // order along K, as the model says), which the compiler vectorises.
  std::vector<float> bt(bv.size());
  for (std::int64_t n = 0; n < n_total; ++n) {
    for (std::int64_t k = 0; k < k_total; ++k) bt[std::size_t(k * n_total + n)] = bv[std::size_t(n * k_total + k)];
  }
  std::vector<float> c(static_cast<std::size_t>(a.rows * n_total));
  const bool fp32 = config.accumulator == Accumulator::kFp32;
  const bool exact = sums_exact_in_double(a, b, p.chunk);
#if defined(_OPENMP)
  // Threads only where there is work for them (a thread team costs more than a small GEMM).
  // Each row's sums are one thread's, in the same order, so the bits do not depend on them.
  const bool big = a.rows * n_total * k_total >= (std::int64_t{1} << 22);
#pragma omp parallel if (big)
#endif
  {
    std::vector<float> total(static_cast<std::size_t>(n_total)), part(total.size());
    std::vector<double> wide(total.size());
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
    for (std::int64_t m = 0; m < a.rows; ++m) {
      const float* ar = av.data() + m * k_total;
      for (std::int64_t k0 = 0; k0 < k_total; k0 += p.chunk) {
        const std::int64_t k1 = std::min(k_total, k0 + p.chunk);
        if (fp32) {
          // FP8 x FP8 is exact in FP32, so each addition rounds once, as the model says.
          std::fill(part.begin(), part.end(), 0.0f);
          for (std::int64_t k = k0; k < k1; ++k) {
            const float x = ar[k];
            const float* bk = bt.data() + k * n_total;
            for (std::int64_t n = 0; n < n_total; ++n) part[std::size_t(n)] += x * bk[n];
          }
        } else {
          std::fill(wide.begin(), wide.end(), 0.0);
          for (std::int64_t k = k0; k < k1; ++k) {
            const double x = ar[k];
            const float* bk = bt.data() + k * n_total;
            if (exact) {  // s + p exact: truncating it is the model's step (vectorised)
              for (std::int64_t n = 0; n < n_total; ++n) {
                wide[std::size_t(n)] = truncate14_bits(wide[std::size_t(n)] + x * double(bk[n]));
              }
            } else {
              for (std::int64_t n = 0; n < n_total; ++n) {
                wide[std::size_t(n)] = add_truncated(wide[std::size_t(n)], x * double(bk[n]),
                                                     kTensorCoreAccumulatorBits);
              }
            }
          }
          // 14 bits: exact in FP32.
          for (std::int64_t n = 0; n < n_total; ++n) part[std::size_t(n)] = float(wide[std::size_t(n)]);
        }
        for (std::int64_t n = 0; n < n_total; ++n) {
          const std::size_t j = std::size_t(n);
          total[j] = k0 == 0 && !p.scale_per_chunk
                         ? part[j]
                         : promote(k0 == 0 ? 0.0f : total[j], part[j],
                                   dequant_of(a, b, m, n, k0), p.scale_per_chunk);
        }
      }
      for (std::int64_t n = 0; n < n_total; ++n) {
        const float t = total[std::size_t(n)];
        c[std::size_t(m * n_total + n)] = p.scale_per_chunk ? t : t * dequant_of(a, b, m, n, 0);
      }
    }
  }
  return c;
}

std::vector<float> gemm_reference(const Fp8Matrix& a, const Fp8Matrix& b,
                                  const GemmConfig& config) {
  const Plan p = plan(a, b, config);
  const std::vector<std::int64_t> av = fixed_values(a), bv = fixed_values(b);
  const bool truncate = config.accumulator == Accumulator::kTensorCore14;
  const int bits = truncate ? kTensorCoreAccumulatorBits : 24;
  const std::int64_t k_total = a.cols;
  std::vector<float> c(static_cast<std::size_t>(a.rows * b.rows));
  for (std::int64_t m = 0; m < a.rows; ++m) {
    for (std::int64_t n = 0; n < b.rows; ++n) {
      float total = 0;
      for (std::int64_t k0 = 0; k0 < k_total; k0 += p.chunk) {
        const std::int64_t k1 = std::min(k_total, k0 + p.chunk);
        Fixed s = 0;
        for (std::int64_t k = k0; k < k1; ++k) {
          s = round_fixed(s + Fixed(av[static_cast<std::size_t>(m * k_total + k)]) *
                                  Fixed(bv[static_cast<std::size_t>(n * k_total + k)]),
                          bits, truncate);
        }
        const float partial = static_cast<float>(fixed_to_double(s));
        total = k0 == 0 && !p.scale_per_chunk
                    ? partial
                    : promote(total, partial, dequant_of(a, b, m, n, k0), p.scale_per_chunk);
      }
      if (!p.scale_per_chunk) total = total * dequant_of(a, b, m, n, 0);
      c[static_cast<std::size_t>(m * b.rows + n)] = total;
    }
  }
  return c;
}

std::vector<double> gemm_exact(const Fp8Matrix& a, const Fp8Matrix& b) {
  if (a.cols != b.cols) throw InputError("FP8 GEMM: A and B disagree on K");
  const std::vector<std::int64_t> av = fixed_values(a), bv = fixed_values(b);
  const std::int64_t k_total = a.cols;
  std::vector<double> c(static_cast<std::size_t>(a.rows * b.rows));
  for (std::int64_t m = 0; m < a.rows; ++m) {
    for (std::int64_t n = 0; n < b.rows; ++n) {
      // Each run of K under one pair of scales is summed exactly, rounded to nearest in 53
      // bits, times the two FP32 scale_inv values (their product is exact in double).
      long double sum = 0;
      for (std::int64_t k0 = 0; k0 < k_total;) {
        const std::int64_t ka = a.tile_cols - k0 % a.tile_cols;
        const std::int64_t kb = b.tile_cols - k0 % b.tile_cols;
        const std::int64_t k1 = std::min(k_total, k0 + std::min(ka, kb));
        Fixed s = 0;
        for (std::int64_t k = k0; k < k1; ++k) {
          s += Fixed(av[static_cast<std::size_t>(m * k_total + k)]) *
               Fixed(bv[static_cast<std::size_t>(n * k_total + k)]);
        }
        const double d = double(a.scale_inv[static_cast<std::size_t>(a.tile_index(m, k0))]) *
                         double(b.scale_inv[static_cast<std::size_t>(b.tile_index(n, k0))]);
        sum += static_cast<long double>(fixed_to_double(round_fixed(s, 53, false))) * d;
        k0 = k1;
      }
      c[static_cast<std::size_t>(m * b.rows + n)] = static_cast<double>(sum);
    }
  }
  return c;
}

}  // namespace mixpar::fp8
