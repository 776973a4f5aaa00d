// Philox4x32-10: the bijection against Random123's known answers, the (seed, stream, offset)
// mapping, position arithmetic (skip, chunking), the statistics of the uniform and normal
// draws, and the tensor fills for every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "gpu.h"
#include "random/philox.h"

namespace mixpar {
namespace {

struct Kat {
  int rounds;
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};

// Random123 kat_vectors, the philox4x32 lines (counter[4] key[2] -> output[4]).
const Kat kKats[] = {
    {7, {0, 0, 0, 0}, {0, 0}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {7, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {7, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
    {10, {0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {10, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {10, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  for (const Kat& k : kKats) {
    const PhiloxCounter got = philox4x32(k.counter, k.key, k.rounds);
    for (int lane = 0; lane < 4; ++lane) {
      EXPECT_EQ(got[lane], k.expected[lane])
          << "rounds " << k.rounds << " counter[0] " << std::hex << k.counter[0] << " lane " << lane;
    }
  }
}

TEST(Philox, DefaultRoundCountIsTen) {
  const PhiloxCounter c = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  const PhiloxKey k = {0xa4093822, 0x299f31d0};
  EXPECT_EQ(philox4x32(c, k), philox4x32(c, k, 10));
  EXPECT_EQ(philox4x32(c, k, 0), c);  // zero rounds is the identity
  EXPECT_THROW(philox4x32(c, k, -1), std::invalid_argument);
}

// The documented mapping, with block indices and streams that use the high counter words.
TEST(Philox, DrawIsLaneOfCounterBlockStreamKeySeed) {
  const std::uint64_t seed = 0x0123456789abcdefULL;
  const std::uint64_t stream = 0x0000000500000007ULL;
  const Philox g(seed, stream);
  const PhiloxKey key = {0x89abcdef, 0x01234567};
  for (std::uint64_t block : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0xfffffffe},
                              std::uint64_t{0x100000003}, std::uint64_t{1} << 61}) {
    const PhiloxCounter c = {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                             7, 5};
    const PhiloxCounter want = philox4x32(c, key);
    EXPECT_EQ(g.block(block), want);
    for (std::uint32_t lane = 0; lane < 4; ++lane) EXPECT_EQ(g.u32_at(4 * block + lane), want[lane]);
  }
}

TEST(Philox, FirstDrawsOfSeedZeroStreamZeroAreTheZeroCounterKat) {
  Philox g(0);
  EXPECT_EQ(g.next_u32(), 0x6627e8d5u);
  EXPECT_EQ(g.next_u32(), 0xe169c58du);
  EXPECT_EQ(g.next_u32(), 0xbc57ac4cu);
  EXPECT_EQ(g.next_u32(), 0x9b00dbd8u);
  EXPECT_EQ(g.offset(), 4u);
}

std::vector<std::uint32_t> draws(Philox g, int n) {
  std::vector<std::uint32_t> out(static_cast<std::size_t>(n));
  for (auto& x : out) x = g.next_u32();
  return out;
}

TEST(Philox, IsDeterministic) {
  EXPECT_EQ(draws(Philox(42, 3, 17), 1000), draws(Philox(42, 3, 17), 1000));
}

// Ranks seeded alike with their rank as stream: identical weights are a matter of using the
// same stream, distinct data a matter of distinct streams. No two streams share a draw here.
TEST(Philox, StreamsDiffer) {
  std::set<std::uint32_t> seen;
  const int kStreams = 8, kDraws = 1000;
  for (int s = 0; s < kStreams; ++s) {
    for (std::uint32_t x : draws(Philox(42, static_cast<std::uint64_t>(s)), kDraws)) seen.insert(x);
  }
  // 8000 draws out of 2^32: a repeat has probability ~0.7%; allow at most one.
  EXPECT_GE(seen.size(), static_cast<std::size_t>(kStreams * kDraws - 1));
  EXPECT_NE(draws(Philox(42, 0), 4), draws(Philox(42, std::uint64_t{1} << 32), 4));
}

TEST(Philox, SeedsDiffer) {
  EXPECT_NE(draws(Philox(1), 8), draws(Philox(2), 8));
  EXPECT_NE(draws(Philox(1), 8), draws(Philox(1 + (std::uint64_t{1} << 32)), 8));  // high key word
}

TEST(Philox, SkipMatchesDrawing) {
  for (std::uint64_t n : {0, 1, 3, 4, 5, 1001}) {
    Philox drawn(9, 2), skipped(9, 2);
    for (std::uint64_t i = 0; i < n; ++i) drawn.next_u32();
    skipped.skip(n);
    EXPECT_EQ(skipped.offset(), n);
    EXPECT_EQ(draws(skipped, 9), draws(drawn, 9)) << "n = " << n;
    EXPECT_EQ(draws(Philox(9, 2, n), 9), draws(drawn, 9)) << "offset in constructor, n = " << n;
  }
  // Far jumps cost nothing: position 2^40 + 2 is lane 2 of block 2^38.
  Philox far(9, 2);
  far.skip((std::uint64_t{1} << 40) + 2);
  EXPECT_EQ(far.next_u32(), far.block(std::uint64_t{1} << 38)[2]);
}

TEST(Philox, SkipAfterPartialBlockDoesNotReuseTheCachedBlock) {
  Philox g(5);
  g.next_u32();  // caches block 0
  g.skip(6);     // position 7: lane 3 of block 1
  EXPECT_EQ(g.next_u32(), Philox(5).u32_at(7));
}

TEST(Philox, ChunkingDoesNotChangeValues) {
  const int n = 1000;
  const std::vector<std::uint32_t> whole = draws(Philox(11, 1), n);
  Philox g(11, 1);
  std::vector<std::uint32_t> pieces;
  for (int chunk : {1, 3, 7, 2, 500, 487}) {
    for (int i = 0; i < chunk; ++i) pieces.push_back(g.next_u32());
  }
  EXPECT_EQ(pieces, whole);
}

TEST(Philox, UniformGridEndsAtOneMinusTwoToTheMinus24) {
  EXPECT_EQ(uniform_from_u32(0), 0.0f);
  EXPECT_EQ(uniform_from_u32(0xff), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(uniform_from_u32(0x100), 0x1p-24f);
  EXPECT_EQ(uniform_from_u32(0xffffffff), 1.0f - 0x1p-24f);
  EXPECT_LT(uniform_from_u32(0xffffffff), 1.0f);
}

TEST(Philox, NormalTailIsBoundedBySqrt64Ln2) {
  EXPECT_EQ(normal_from_u32(0xffffffff, 0), 0.0);  // u1 = 1: radius 0
  const double biggest = std::sqrt(64.0 * std::log(2.0));
  EXPECT_NEAR(normal_from_u32(0, 0), biggest, 1e-9);
  EXPECT_NEAR(normal_from_u32(0, 0x80000000u), -biggest, 1e-9);  // u2 = 1/2: cos = -1
}

// Moments over a million draws, tolerances six standard deviations of the estimator:
// uniform mean sd sqrt(1/12/N) = 2.9e-4; sample variance sd sqrt((1/80 - 1/144)/N) = 7.5e-5;
// normal mean sd 1/sqrt(N) = 1e-3; normal sample variance sd sqrt(2/N) = 1.4e-3.
constexpr int kMoments = 1'000'000;

TEST(Random, UniformIsInUnitIntervalWithMeanHalfAndVarianceTwelfth) {
  Philox g(2024);
  double sum = 0, sum2 = 0;
  for (int i = 0; i < kMoments; ++i) {
    const float u = g.next_uniform();
    ASSERT_GE(u, 0.0f) << "draw " << i;
    ASSERT_LT(u, 1.0f) << "draw " << i;
    sum += u;
    sum2 += static_cast<double>(u) * u;
  }
  const double mean = sum / kMoments;
  const double var = sum2 / kMoments - mean * mean;
  EXPECT_NEAR(mean, 0.5, 6 * std::sqrt(1.0 / 12 / kMoments));
  EXPECT_NEAR(var, 1.0 / 12, 6 * std::sqrt((1.0 / 80 - 1.0 / 144) / kMoments));
}

TEST(Random, NormalHasMeanZeroAndStdOne) {
  Philox g(2025);
  double sum = 0, sum2 = 0;
  for (int i = 0; i < kMoments; ++i) {
    const double z = g.next_normal();
    sum += z;
    sum2 += z * z;
  }
  const double mean = sum / kMoments;
  const double var = sum2 / kMoments - mean * mean;
  EXPECT_NEAR(mean, 0.0, 6 / std::sqrt(double{kMoments}));
  EXPECT_NEAR(var, 1.0, 6 * std::sqrt(2.0 / kMoments));
  EXPECT_EQ(g.offset(), 2u * kMoments);  // two draws per normal
}

TEST(Random, NormalMeanAndStdScaleTheStandardNormal) {
  Philox a(8), b(8);
  for (int i = 0; i < 100; ++i) {
    const double z = a.next_normal();
    EXPECT_NEAR(b.next_normal(3.0f, 0.02f), 3.0 + 0.02 * z, 1e-6);
  }
}

TEST(Random, UniformRangeIsScaledAndNeverOverflows) {
  Philox g(4);
  for (int i = 0; i < 10000; ++i) {
    const float x = g.next_uniform(-2.0f, 6.0f);
    ASSERT_GE(x, -2.0f);
    ASSERT_LT(x, 6.0f);
  }
  const float big = 3.4e38f;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(std::isfinite(g.next_uniform(-big, big)));
}

// ---- tensor fills

std::vector<float> f32_values(const Tensor& t) { return t.to_floats(); }

TEST(Random, FillUniformElementIIsDrawOffsetPlusI) {
  Tensor t = Tensor::empty({3, 5}, DType::kF32);
  Philox g(7, 1, 3);
  fill_uniform(t, g, -1.0f, 1.0f);
  EXPECT_EQ(g.offset(), 3u + 15u);
  const Philox ref(7, 1);
  const std::vector<float> v = f32_values(t);
  for (std::uint64_t i = 0; i < 15; ++i) {
    EXPECT_EQ(v[i], static_cast<float>(-1.0 + 2.0 * uniform_from_u32(ref.u32_at(3 + i)))) << i;
  }
}

TEST(Random, FillNormalElementIUsesDrawsTwoIAndTwoIPlusOne) {
  Tensor t = Tensor::empty({9}, DType::kF32);
  Philox g(7, 2, 1);
  fill_normal(t, g, 0.5f, 2.0f);
  EXPECT_EQ(g.offset(), 1u + 18u);
  const Philox ref(7, 2);
  const std::vector<float> v = f32_values(t);
  for (std::uint64_t i = 0; i < 9; ++i) {
    const double z = normal_from_u32(ref.u32_at(1 + 2 * i), ref.u32_at(2 + 2 * i));
    EXPECT_EQ(v[i], static_cast<float>(0.5 + 2.0 * z)) << i;
  }
}

// A shard filled alone (rows [3, 7) after skipping the draws of rows [0, 3)) holds exactly
// the values of the same rows of a whole fill: how a rank initialises only its slice.
TEST(Random, FillingPiecesOrShardsGivesTheValuesOfOneFill) {
  Tensor whole = Tensor::empty({10, 6}, DType::kF32);
  Philox gw(99);
  fill_normal(whole, gw, 0.0f, 0.02f);

  Tensor pieces = Tensor::empty({10, 6}, DType::kF32);
  Philox gp(99);
  for (auto [begin, count] : {std::pair{0, 1}, std::pair{1, 4}, std::pair{5, 5}}) {
    Tensor part = pieces.rows(begin, count);
    fill_normal(part, gp, 0.0f, 0.02f);
  }
  EXPECT_EQ(f32_values(pieces), f32_values(whole));

  Tensor shard = Tensor::empty({4, 6}, DType::kF32);
  Philox gs(99);
  gs.skip(2 * 3 * 6);  // two draws per element, 3 rows of 6
  fill_normal(shard, gs, 0.0f, 0.02f);
  EXPECT_EQ(f32_values(shard), f32_values(whole.rows(3, 4)));

  Tensor odd = Tensor::empty({61}, DType::kF32), odd_whole = Tensor::empty({61}, DType::kF32);
  Philox go(5), gow(5);
  fill_uniform(odd_whole, gow);
  for (auto [begin, count] : {std::pair{0, 3}, std::pair{3, 1}, std::pair{4, 57}}) {
    Tensor part = odd.flat_slice(begin, count);
    fill_uniform(part, go);
  }
  EXPECT_EQ(f32_values(odd), f32_values(odd_whole));
}

TEST(Random, FillRoundsTheFp32ValuesToEveryDtype) {
  for (DType d : kAllDTypes) {
    Tensor ref = Tensor::empty({257}, DType::kF32);
    Tensor t = Tensor::empty({257}, d);
    Philox gr(3), gt(3);
    fill_normal(ref, gr, 0.0f, 3.0f);
    fill_normal(t, gt, 0.0f, 3.0f);
    const std::vector<float> want = f32_values(ref), got = f32_values(t);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], round_to(d, want[i])) << dtype_name(d) << " element " << i;
    }
    Philox ur(4), ut(4);
    fill_uniform(ref, ur, -1.0f, 1.0f);
    fill_uniform(t, ut, -1.0f, 1.0f);
    const std::vector<float> uwant = f32_values(ref), ugot = f32_values(t);
    for (std::size_t i = 0; i < uwant.size(); ++i) {
      ASSERT_EQ(ugot[i], round_to(d, uwant[i])) << dtype_name(d) << " element " << i;
    }
  }
}

TEST(Random, FillLargerThanOneChunkMatchesScalarDraws) {
  Tensor t = Tensor::empty({3000}, DType::kBF16);
  Philox g(12), ref(12);
  fill_uniform(t, g);
  const std::vector<float> v = f32_values(t);
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], round_to(DType::kBF16, ref.next_uniform())) << i;
}

TEST(Random, FillRejectsBadRangesAndUndefinedTensors) {
  Tensor t = Tensor::empty({4}, DType::kF32);
  Philox g(1);
  EXPECT_THROW(fill_uniform(t, g, 1.0f, 0.0f), std::invalid_argument);
  EXPECT_THROW(fill_uniform(t, g, 0.0f, INFINITY), std::invalid_argument);
  EXPECT_THROW(fill_normal(t, g, 0.0f, -1.0f), std::invalid_argument);
  EXPECT_THROW(fill_normal(t, g, NAN, 1.0f), std::invalid_argument);
  EXPECT_EQ(g.offset(), 0u);  // nothing drawn by a rejected call
  Tensor undefined;
  EXPECT_THROW(fill_uniform(undefined, g), std::logic_error);
}

TEST(Random, FillOfAnEmptyTensorDrawsNothing) {
  Tensor t = Tensor::empty({0, 3}, DType::kF16);
  Philox g(1);
  fill_normal(t, g);
  EXPECT_EQ(g.offset(), 0u);
}

TEST(RandomCuda, FillOfADeviceTensorMatchesTheHostFill) {
  SKIP_WITHOUT_GPU();
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  for (DType d : kAllDTypes) {
    Tensor host = Tensor::empty({1000}, d, MemCategory::kParameters);
    Tensor dev = Tensor::empty({1000}, d, MemCategory::kParameters, Device::kCUDA);
    Philox gh(21, 4), gd(21, 4);
    fill_normal(host, gh, 0.0f, 0.02f);
    fill_normal(dev, gd, 0.0f, 0.02f);
    EXPECT_EQ(gd.offset(), gh.offset());
    EXPECT_EQ(dev.to_floats(), host.to_floats()) << dtype_name(d);
  }
  EXPECT_EQ(ledger.live(MemCategory::kParameters, Device::kCPU), 0u);  // staging returned
}

}  // namespace
}  // namespace mixpar
