// Reductions and copies for the local backend. Blocks of kBlock elements keep the FP32 (or
// double) accumulator on the stack and in cache; each block reads every rank's input in rank
// order, which is what makes the result independent of thread timing.

#include "comm/local_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "numerics/formats.h"

namespace mixpar::local {
namespace {

constexpr std::int64_t kBlock = 1024;

template <class Acc> void combine(Acc* acc, const Acc* x, std::int64_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (std::int64_t i = 0; i < n; ++i) acc[i] += x[i];
    return;
  }
  // Max: a NaN anywhere wins, so a found-inf flag reduced with max can never be lost.
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isnan(acc[i]) && (std::isnan(x[i]) || x[i] > acc[i])) acc[i] = x[i];
  }
}

// The accumulator type is double for f64 and float for everything else.
template <class Acc> constexpr DType kAccType = sizeof(Acc) == 8 ? DType::kF64 : DType::kF32;

template <class Acc>
void reduce_block(std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts,
                  std::int64_t n, DType dtype, ReduceOp op) {
  Acc acc[kBlock];
  Acc x[kBlock];
  convert(srcs[0], dtype, acc, kAccType<Acc>, static_cast<std::size_t>(n));
  for (std::size_t r = 1; r < srcs.size(); ++r) {
    convert(srcs[r], dtype, x, kAccType<Acc>, static_cast<std::size_t>(n));
    combine(acc, x, n, op);
  }
  // Round once into the first destination, then copy: every rank gets the same bits.
  convert(acc, kAccType<Acc>, dsts[0], dtype, static_cast<std::size_t>(n), Saturation::kNoSat);
  for (std::size_t d = 1; d < dsts.size(); ++d) {
    copy_bytes(dsts[d], dsts[0], static_cast<std::size_t>(n) * dtype_size(dtype));
  }
}

}  // namespace

void reduce_elements(std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts,
                     std::int64_t count, DType dtype, ReduceOp op) {
  if (count <= 0 || srcs.empty() || dsts.empty()) return;
  const std::size_t es = dtype_size(dtype);
  std::vector<const std::byte*> in(srcs.size());
  std::vector<std::byte*> out(dsts.size());
  for (std::int64_t begin = 0; begin < count; begin += kBlock) {
    const std::int64_t n = std::min(kBlock, count - begin);
    const std::size_t off = static_cast<std::size_t>(begin) * es;
    for (std::size_t r = 0; r < srcs.size(); ++r) in[r] = srcs[r] + off;
    for (std::size_t d = 0; d < dsts.size(); ++d) out[d] = dsts[d] + off;
    if (dtype == DType::kF64) reduce_block<double>(in, out, n, dtype, op);
    else reduce_block<float>(in, out, n, dtype, op);
  }
}

void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  std::memcpy(dst, src, bytes);
}

}  // namespace mixpar::local
