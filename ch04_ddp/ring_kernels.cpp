// hop_combine: blocks of kBlock elements converted into an FP32 (or double) accumulator on the
// stack, combined, and rounded into the destination. f32 + f32 -> f32 skips the conversions:
// it is the hot loop of every FP32 gradient all-reduce, and the compiler vectorises it.
#include "ring_kernels.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace mixpar::ch04 {
namespace {

constexpr std::int64_t kBlock = 1024;

template <class Acc> constexpr DType kAccType = sizeof(Acc) == 8 ? DType::kF64 : DType::kF32;

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

std::byte* bytes(const Tensor& t, std::int64_t offset) {
  return static_cast<std::byte*>(t.data()) + offset * std::int64_t(dtype_size(t.dtype()));
}

template <class Acc>
void combine_converted(const Tensor& incoming, const Tensor& own, Tensor& out, ReduceOp op) {
  Acc acc[kBlock];
  Acc x[kBlock];
  for (std::int64_t begin = 0; begin < out.numel(); begin += kBlock) {
    const std::int64_t n = std::min(kBlock, out.numel() - begin);
    const auto un = static_cast<std::size_t>(n);
    convert(bytes(incoming, begin), incoming.dtype(), acc, kAccType<Acc>, un);
    convert(bytes(own, begin), own.dtype(), x, kAccType<Acc>, un);
    combine(acc, x, n, op);
    convert(acc, kAccType<Acc>, bytes(out, begin), out.dtype(), un, Saturation::kNoSat);
  }
}

void combine_f32(const Tensor& incoming, const Tensor& own, Tensor& out, ReduceOp op) {
  const float* a = incoming.data_as<float>();
  const float* b = own.data_as<float>();
  float* o = out.data_as<float>();
  const std::int64_t n = out.numel();
  if (op == ReduceOp::kSum) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    o[i] = (!std::isnan(a[i]) && (std::isnan(b[i]) || b[i] > a[i])) ? b[i] : a[i];
  }
}

}  // namespace

void hop_combine(const Tensor& incoming, const Tensor& own, Tensor& out, ReduceOp op) {
  if (incoming.numel() != out.numel() || own.numel() != out.numel()) {
    throw std::invalid_argument("hop_combine: " + std::to_string(incoming.numel()) + " + " +
                                std::to_string(own.numel()) + " -> " +
                                std::to_string(out.numel()) + " elements");
  }
  if (out.numel() == 0) return;
  const bool all_f32 = incoming.dtype() == DType::kF32 && own.dtype() == DType::kF32 &&
                       out.dtype() == DType::kF32;
  const bool any_f64 = incoming.dtype() == DType::kF64 || own.dtype() == DType::kF64 ||
                       out.dtype() == DType::kF64;
  if (all_f32) combine_f32(incoming, own, out, op);
  else if (any_f64) combine_converted<double>(incoming, own, out, op);
  else combine_converted<float>(incoming, own, out, op);
}

}  // namespace mixpar::ch04
