// Philox4x32-10 and the fills built on it. The bijection follows the paper and Random123's
// philox4x32round/bumpkey (the constants below are theirs); tests check it against the
// Random123 known-answer vectors.
#include "random/philox.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace mixpar {

namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53;   // round multipliers
constexpr std::uint32_t kMul1 = 0xCD9E8D57;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9;  // key increments: golden ratio, sqrt(3) - 1
constexpr std::uint32_t kWeyl1 = 0xBB67AE85;

PhiloxCounter round_once(const PhiloxCounter& c, const PhiloxKey& k) {
  const std::uint64_t p0 = std::uint64_t{kMul0} * c[0];
  const std::uint64_t p1 = std::uint64_t{kMul1} * c[2];
  const auto hi = [](std::uint64_t p) { return static_cast<std::uint32_t>(p >> 32); };
  const auto lo = [](std::uint64_t p) { return static_cast<std::uint32_t>(p); };
  return {hi(p1) ^ c[1] ^ k[0], lo(p1), hi(p0) ^ c[3] ^ k[1], lo(p0)};
}

// Generates values for a CPU tensor in FP32 chunks and rounds each chunk into place. The
// chunk lives on the stack: a heap scratch buffer would be memory the ledger never sees.
template <class Gen>
void fill_cpu(Tensor& t, Gen&& gen) {
  constexpr std::size_t kChunk = 1024;
  std::array<float, kChunk> buf;
  const std::size_t n = static_cast<std::size_t>(t.numel());
  const std::size_t es = dtype_size(t.dtype());
  char* dst = static_cast<char*>(t.data());
  for (std::size_t begin = 0; begin < n; begin += kChunk) {
    const std::size_t m = std::min(kChunk, n - begin);
    for (std::size_t i = 0; i < m; ++i) buf[i] = gen();
    convert(buf.data(), DType::kF32, dst + begin * es, t.dtype(), m);
  }
}

template <class Gen>
void fill_any(Tensor& t, Gen&& gen) {
  if (t.device() == Device::kCPU) {
    fill_cpu(t, gen);
    return;
  }
  Tensor host = Tensor::empty(t.shape(), t.dtype(), t.category(), Device::kCPU);
  fill_cpu(host, gen);
  t.copy_from(host);
}

}  // namespace

PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key, int rounds) {
  if (rounds < 0) throw std::invalid_argument("philox4x32: negative round count");
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {  // bump the key between rounds, not before the first
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = round_once(counter, key);
  }
  return counter;
}

double normal_from_u32(std::uint32_t a, std::uint32_t b) {
  const double u1 = (static_cast<double>(a) + 1.0) * 0x1p-32;
  const double u2 = static_cast<double>(b) * 0x1p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Philox::Philox(std::uint64_t seed, std::uint64_t stream, std::uint64_t offset)
    : seed_(seed), stream_(stream), offset_(offset) {}

PhiloxCounter Philox::block(std::uint64_t index) const {
  const PhiloxCounter counter = {static_cast<std::uint32_t>(index),
                                 static_cast<std::uint32_t>(index >> 32),
                                 static_cast<std::uint32_t>(stream_),
                                 static_cast<std::uint32_t>(stream_ >> 32)};
  const PhiloxKey key = {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)};
  return philox4x32(counter, key);
}

std::uint32_t Philox::u32_at(std::uint64_t position) const { return block(position / 4)[position % 4]; }

std::uint32_t Philox::next_u32() {
  const std::uint64_t index = offset_ / 4;
  if (index != cached_index_) {
    cached_ = block(index);
    cached_index_ = index;
  }
  return cached_[offset_++ % 4];
}

float Philox::next_uniform() { return uniform_from_u32(next_u32()); }

// In double so that hi - lo cannot overflow (lo = -FLT_MAX, hi = FLT_MAX) and rounds once.
float Philox::next_uniform(float lo, float hi) {
  return static_cast<float>(lo + (static_cast<double>(hi) - lo) * next_uniform());
}

float Philox::next_normal(float mean, float std) {
  const std::uint32_t a = next_u32();
  const std::uint32_t b = next_u32();
  return static_cast<float>(mean + std * normal_from_u32(a, b));
}

void fill_uniform(Tensor& t, Philox& g, float lo, float hi) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi)) {
    throw std::invalid_argument("fill_uniform: need finite lo <= hi, got [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + ")");
  }
  fill_any(t, [&] { return g.next_uniform(lo, hi); });
}

void fill_normal(Tensor& t, Philox& g, float mean, float std) {
  if (!(std::isfinite(mean) && std::isfinite(std) && std >= 0.f)) {
    throw std::invalid_argument("fill_normal: need finite mean and std >= 0, got mean " +
                                std::to_string(mean) + ", std " + std::to_string(std));
  }
  fill_any(t, [&] { return g.next_normal(mean, std); });
}

}  // namespace mixpar
