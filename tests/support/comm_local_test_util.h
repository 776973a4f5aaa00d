// Helpers for the communicator tests (common/comm's backends, chapter 4's ring and DDP, on
// threads and under mpirun): deterministic per-rank data, the documented reduction semantics
// computed serially (the specification every backend must match bit for bit), and a runner
// that collects the CommError each rank saw.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/local_backend.h"
#include "expect.h"

namespace mixpar::comm_testing {

// Full-precision values in [-2, 2) times 2^e, e spread over `spread` binades: rank- and
// index-dependent, so that sums round in the accumulator and the reduction order shows in
// the bits (with a narrow spread, sums of few values are exact and any order would pass).
inline float value_at(int rank, std::int64_t i, int spread) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^
                    static_cast<std::uint32_t>(rank + 1) * 2246822519u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  const float unit = static_cast<float>(h >> 8) / static_cast<float>(1 << 22) - 2.0f;
  const int e = static_cast<int>((i * 7 + rank * 5) % spread) - spread / 2;
  return std::ldexp(unit, e);
}

// Binades to spread values over: as wide as the format allows without overflowing a sum of
// 8 ranks (FP8 and FP16 are narrow), and wider than the accumulator's significand elsewhere.
inline int spread_for(DType dtype) {
  switch (dtype) {
    case DType::kE4M3:
    case DType::kE5M2: return 8;
    case DType::kF16: return 20;
    case DType::kF64: return 60;
    default: return 40;
  }
}

// [n] elements of rank `rank`'s data, stored in dtype (rounded once from the float).
inline Tensor rank_data(int rank, std::int64_t n, DType dtype) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = value_at(rank, i, spread_for(dtype));
  }
  return Tensor::from_floats(v, {n}, dtype);
}

// Element i of a CPU tensor as a double (exact for every dtype).
inline double element(const Tensor& t, std::int64_t i) {
  if (t.dtype() == DType::kF64) return t.data_as<double>()[i];
  return t.flat_slice(i, 1).item();
}

// All elements of a CPU tensor as doubles (exact for every dtype).
inline std::vector<double> elements(const Tensor& t) {
  if (t.dtype() == DType::kF64) return {t.data_as<double>(), t.data_as<double>() + t.numel()};
  const std::vector<float> f = t.to_floats();
  return {f.begin(), f.end()};
}

// The documented all-reduce of rank_data over `ranks` ranks, element by element: rank order,
// an FP32 accumulator (double for f64), NaN-propagating max, one rounding without saturation.
inline Tensor serial_reduce(int ranks, std::int64_t n, DType dtype, ReduceOp op) {
  std::vector<std::vector<double>> in;
  for (int r = 0; r < ranks; ++r) in.push_back(elements(rank_data(r, n, dtype)));
  Tensor out = Tensor::empty({n}, dtype);
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    double acc64 = in[0][i];
    float acc32 = static_cast<float>(acc64);
    for (std::size_t r = 1; r < in.size(); ++r) {
      const double x = in[r][i];
      if (op == ReduceOp::kSum) {
        acc64 += x;
        acc32 += static_cast<float>(x);
      } else if (!std::isnan(acc64) && (std::isnan(x) || x > acc64)) {
        acc64 = x;
        acc32 = static_cast<float>(x);
      }
    }
    std::byte* dst = static_cast<std::byte*>(out.data()) + i * es;
    if (dtype == DType::kF64) std::memcpy(dst, &acc64, sizeof acc64);
    else convert(&acc32, DType::kF32, dst, dtype, 1, Saturation::kNoSat);
  }
  return out;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

inline std::vector<std::byte> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.data());
  return {p, p + t.nbytes()};
}

// What a failing world reported: the CommError run_local threw, and each rank's own.
struct CommFailure {
  std::string thrown;                  // empty if run_local threw no CommError
  std::vector<std::string> per_rank;   // by world rank; empty if that rank saw none
};

inline CommFailure run_expecting_comm_error(int n, const std::function<void(Communicator&)>& fn,
                                            const LocalOptions& opts = {}) {
  CommFailure f;
  f.per_rank.resize(static_cast<std::size_t>(n));
  try {
    run_local(
        n,
        [&](Communicator& c) {
          try {
            fn(c);
          } catch (const CommError& e) {
            f.per_rank[static_cast<std::size_t>(c.rank())] = e.what();
            throw;
          }
        },
        opts);
  } catch (const CommError& e) {
    f.thrown = e.what();
  }
  return f;
}

}  // namespace mixpar::comm_testing
