// Row sums and exponentials whose results depend on nothing but the values: not on where the
// row starts in memory, nor on the vector width of the ISA the sums were compiled for.
//
// Why not Eigen's own `.sum()` and `.exp()` on a Map: Eigen vectorises an expression over an
// array of unknown alignment by first peeling scalar elements until the pointer is aligned to a
// whole vector (32 bytes with AVX2, 64 with AVX-512), then running packets, then a scalar tail.
// Which elements go through the scalar code and which through packets, and so the order of a
// sum's additions (and, for exp, which of two implementations computes each element: the
// packet polynomial or std::exp), follows the address of the row. A parameter at an offset
// that is a multiple of 32 but not of 64 bytes in one run and of 64 in another (the two layouts
// of an interleaved pipeline's chunks, say) then gets different last bits on an AVX-512 build,
// and only there. docs/REFERENCE.md, "Which results are bit-identical where", lists what holds.
//
// lane_sum: element i is added into lane i mod 8 (kSumLanes), each lane in increasing i, then
// the lanes are folded in a fixed tree: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Every addition
// is one FP32 (or FP64) addition rounded to nearest, in an order written in the source: the
// compiler may vectorise the eight lanes (they are independent) but may not reassociate them
// (no -ffast-math), so the result is the same on SSE2, AVX2 and AVX-512 builds, at any
// alignment. Eight lanes keep it as fast as Eigen's on an AVX2 core.
//
// exp_in_place: whole packets of the build's vector width from the row's first element, then
// std::exp on the tail, whatever the alignment: each element's exponential depends on its
// index in the row and on the build (AVX2's and AVX-512's packet polynomials differ), never on
// the address.
#pragma once

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstdint>

namespace mixpar::ops {

inline constexpr int kSumLanes = 8;

// sum over i in [0, n) of term(i), in the fixed order above. term(i) must be a pure function of
// i computed elementwise (a product, a difference, a square).
template <class C, class Term>
inline C lane_sum(std::int64_t n, Term&& term) {
  C lane[kSumLanes] = {};
  std::int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) lane[l] += term(i + l);
  }
  for (int l = 0; i < n; ++i, ++l) lane[l] += term(i);
  const C a0 = lane[0] + lane[4], a1 = lane[1] + lane[5], a2 = lane[2] + lane[6],
          a3 = lane[3] + lane[7];
  return (a0 + a2) + (a1 + a3);
}

template <class C>
inline C lane_sum(const C* p, std::int64_t n) {
  return lane_sum<C>(n, [p](std::int64_t i) { return p[i]; });
}

// sum over i of a[i] * b[i], each product rounded, then lane_sum's order.
template <class C>
inline C lane_dot(const C* a, const C* b, std::int64_t n) {
  return lane_sum<C>(n, [a, b](std::int64_t i) { return a[i] * b[i]; });
}

// out[j] (+)= sum over rows r = 0, 1, ... of x[r * cols + j]: each column in row order,
// vectorised across columns only (every element's order is the rows'), the column sums
// computed first and added to out once when accumulating.
template <class C>
inline void column_sums(const C* x, std::int64_t rows, std::int64_t cols, C* out, bool accumulate,
                        C* scratch) {
  for (std::int64_t j = 0; j < cols; ++j) scratch[j] = C(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const C* row = x + r * cols;
    for (std::int64_t j = 0; j < cols; ++j) scratch[j] += row[j];
  }
  for (std::int64_t j = 0; j < cols; ++j) out[j] = accumulate ? out[j] + scratch[j] : scratch[j];
}

// column_sums of a bf16 array: each element widened exactly (the FP32 pattern whose top half it
// is) as it is added, in the same order, so the sums are those of column_sums on the widened
// array without the widened copy.
inline void column_sums_bf16(const std::uint16_t* x, std::int64_t rows, std::int64_t cols,
                             float* out, bool accumulate, float* scratch) {
  for (std::int64_t j = 0; j < cols; ++j) scratch[j] = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint16_t* row = x + r * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      scratch[j] += std::bit_cast<float>(static_cast<std::uint32_t>(row[j]) << 16);
    }
  }
  for (std::int64_t j = 0; j < cols; ++j) out[j] = accumulate ? out[j] + scratch[j] : scratch[j];
}

// p[i] = exp(p[i]) for i in [0, n): packets from p[0], std::exp on the last n mod width.
template <class C>
inline void exp_in_place(C* p, std::int64_t n) {
  std::int64_t i = 0;
#if !defined(EIGEN_DONT_VECTORIZE)
  using Traits = Eigen::internal::packet_traits<C>;
  if constexpr (Traits::Vectorizable && Traits::HasExp) {
    using Packet = typename Traits::type;
    constexpr int kWidth = Traits::size;
    for (; i + kWidth <= n; i += kWidth) {
      Eigen::internal::pstoreu(p + i, Eigen::internal::pexp(Eigen::internal::ploadu<Packet>(p + i)));
    }
  }
#endif
  for (; i < n; ++i) p[i] = std::exp(p[i]);
}

}  // namespace mixpar::ops
