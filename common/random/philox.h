// Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), the
// generator of cuRAND: draw p of (seed, stream) is a pure function, so any rank or thread can
// produce any part of a stream alone, in any order, and chunking never changes a value.
// Fills generate FP32 values and round them to the tensor's dtype (formats.h rounding).
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace mixpar {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// The keyed bijection on 128-bit counters: `rounds` rounds of two 32x32->64 multiplies, with
// the key bumped by the Weyl constants between rounds. The paper finds 7 rounds pass BigCrush;
// 10, the default of Random123 and cuRAND, keeps a safety margin. Other counts are for tests.
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key, int rounds = 10);

// Draw -> number conversions, exposed so a GPU kernel can be checked against them.
// Uniform, 24-bit method: the top 24 bits of x times 2^-24. Every value of the grid
// {0, 2^-24, ..., 1 - 2^-24} is exactly a float and equally likely, so the result lies in
// [0, 1). (x * 2^-32 rounded to float would land on 1.0 for the top 128 values of x.)
constexpr float uniform_from_u32(std::uint32_t x) {
  return static_cast<float>(x >> 8) * 0x1p-24f;
}
// Box-Muller, one normal from two draws, in double: z = sqrt(-2 ln u1) cos(2 pi u2) with
// u1 = (a + 1) 2^-32 in (0, 1] (ln never sees 0) and u2 = b 2^-32 in [0, 1). |z| <= 6.66
// (sqrt(64 ln 2)), a tail probability of 3e-11 that no initialisation misses.
double normal_from_u32(std::uint32_t a, std::uint32_t b);

// A position in one Philox stream. The mapping, the same as cuRAND's curand() after
// curand_init(seed, subsequence = stream, offset) as curand_kernel.h writes it:
//   key     = {seed low 32 bits, seed high 32 bits}
//   counter = {block low, block high, stream low, stream high}, block = position / 4
//   draw    = philox4x32(counter, key)[position % 4]
// `offset` and `skip` count 32-bit draws. Same seed and stream on every rank gives the same
// initial weights everywhere; stream = rank gives every rank its own data order.
// An object is just a position (and a one-block cache): not for sharing between threads;
// copy it, or build one per thread at the position it should start from.
class Philox {
 public:
  explicit Philox(std::uint64_t seed, std::uint64_t stream = 0, std::uint64_t offset = 0);

  std::uint32_t next_u32();                             // one draw
  float next_uniform();                                 // [0, 1), one draw
  float next_uniform(float lo, float hi);               // lo + (hi - lo) u, one draw
  float next_normal(float mean = 0.f, float std = 1.f); // two draws (see normal_from_u32)

  // Jump ahead n draws: the next draw is the one n draws later, computed directly.
  void skip(std::uint64_t n) { offset_ += n; }

  // Draw `position` of this (seed, stream), leaving the position untouched.
  std::uint32_t u32_at(std::uint64_t position) const;
  // Draws 4 * index .. 4 * index + 3: one evaluation of the bijection.
  PhiloxCounter block(std::uint64_t index) const;

  std::uint64_t seed() const { return seed_; }
  std::uint64_t stream() const { return stream_; }
  std::uint64_t offset() const { return offset_; }  // draws consumed since draw 0

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t offset_;
  // The last block computed, so sequential draws cost one bijection per four.
  std::uint64_t cached_index_ = ~std::uint64_t{0};  // no block has this index (max is 2^62-1)
  PhiloxCounter cached_{};
};

// Tensor fills, any dtype, any device (a device tensor is filled on the host and copied; the
// staging tensor is charged to the ledger like any other). Element i, flat row-major:
//   fill_uniform: draw g.offset() + i, scaled to [lo, hi); g advances by numel.
//   fill_normal:  draws g.offset() + 2i and + 2i + 1; g advances by 2 numel.
// So filling in pieces, or a shard after g.skip(first element * draws per element), gives
// exactly the values of one whole fill. The FP32 value is then rounded to the dtype, which
// (like FP32 arithmetic for some lo, hi) can produce hi itself.
void fill_uniform(Tensor& t, Philox& g, float lo = 0.f, float hi = 1.f);
void fill_normal(Tensor& t, Philox& g, float mean = 0.f, float std = 1.f);

}  // namespace mixpar
