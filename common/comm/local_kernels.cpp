// Reductions and copies for the local backend. Blocks of kBlock elements keep the FP32 (or
// double) accumulator on the stack and in cache; each block reads every rank's input in rank
// order, which is what makes the result independent of thread timing.

#include "comm/local_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "numerics/formats.h"

namespace mixpar::local {
namespace {

constexpr std::int64_t kBlock = 1024;
constexpr std::size_t kStackPointers = 16;

// out[i] = a[i] op b[i]: the one loop every reduction here runs. out may alias a or b; with
// the op chosen outside the loop the compiler vectorises both.
template <class T> void combine(const T* a, const T* b, T* out, std::int64_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    return;
  }
  // Max: a NaN anywhere wins, so a found-inf flag reduced with max can never be lost.
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = !std::isnan(a[i]) && (std::isnan(b[i]) || b[i] > a[i]) ? b[i] : a[i];
  }
}

// The accumulator type is double for f64 and float for everything else.
template <class Acc> constexpr DType kAccType = sizeof(Acc) == 8 ? DType::kF64 : DType::kF32;

template <class Acc>
void reduce_block(std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts,
                  std::int64_t n, DType dtype, ReduceOp op) {
  Acc acc[kBlock];
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  if (dtype == kAccType<Acc> && srcs.size() > 1) {
    // Inputs already in the accumulator's type (FP32 gradients): combine straight out of
    // them instead of first copying each onto the stack (a conversion to the same type is a
    // copy, so the bits are the same); the first step reads two inputs at once. When the
    // first destination shares no byte with any input (the one-shot path's staged inputs),
    // it is the accumulator itself: one pass less.
    const auto in = [&](std::size_t r) { return reinterpret_cast<const Acc*>(srcs[r]); };
    const auto addr = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
    const bool apart = std::none_of(srcs.begin(), srcs.end(), [&](const std::byte* s) {
      return addr(s) < addr(dsts[0]) + bytes && addr(dsts[0]) < addr(s) + bytes;
    });
    Acc* const sum = apart ? reinterpret_cast<Acc*>(dsts[0]) : acc;
    combine(in(0), in(1), sum, n, op);
    for (std::size_t r = 2; r < srcs.size(); ++r) combine(sum, in(r), sum, n, op);
    if (sum == acc) copy_bytes(dsts[0], reinterpret_cast<const std::byte*>(acc), bytes);
    for (std::size_t d = 1; d < dsts.size(); ++d) copy_bytes(dsts[d], dsts[0], bytes);
    return;
  }
  {
    Acc x[kBlock];
    convert(srcs[0], dtype, acc, kAccType<Acc>, static_cast<std::size_t>(n));
    for (std::size_t r = 1; r < srcs.size(); ++r) {
      convert(srcs[r], dtype, x, kAccType<Acc>, static_cast<std::size_t>(n));
      combine(acc, x, acc, n, op);
    }
  }
  // Round once into the first destination, then copy: every rank gets the same bits.
  convert(acc, kAccType<Acc>, dsts[0], dtype, static_cast<std::size_t>(n), Saturation::kNoSat);
  for (std::size_t d = 1; d < dsts.size(); ++d) copy_bytes(dsts[d], dsts[0], bytes);
}

// combine_elements for mixed or narrow dtypes: blocks converted into Acc on the stack.
template <class Acc>
void combine_converted(const std::byte* a, DType a_dtype, const std::byte* b, DType b_dtype,
                       std::byte* out, DType out_dtype, std::int64_t count, ReduceOp op) {
  Acc x[kBlock];
  Acc y[kBlock];
  for (std::int64_t begin = 0; begin < count; begin += kBlock) {
    const std::int64_t n = std::min(kBlock, count - begin);
    const auto un = static_cast<std::size_t>(n);
    const auto at = [&](DType dt) { return static_cast<std::size_t>(begin) * dtype_size(dt); };
    convert(a + at(a_dtype), a_dtype, x, kAccType<Acc>, un);
    convert(b + at(b_dtype), b_dtype, y, kAccType<Acc>, un);
    combine(x, y, x, n, op);
    convert(x, kAccType<Acc>, out + at(out_dtype), out_dtype, un, Saturation::kNoSat);
  }
}

template <class T>
void combine_direct(const std::byte* a, const std::byte* b, std::byte* out, std::int64_t count,
                    ReduceOp op) {
  combine(reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
          reinterpret_cast<T*>(out), count, op);
}

}  // namespace

void combine_elements(const std::byte* a, DType a_dtype, const std::byte* b, DType b_dtype,
                      std::byte* out, DType out_dtype, std::int64_t count, ReduceOp op) {
  if (count <= 0) return;
  // All three already in the accumulator's type (every FP32 gradient all-reduce): one pass,
  // no conversions. The same bits as the converted path, which would only copy.
  const bool same = a_dtype == b_dtype && b_dtype == out_dtype;
  const bool any_f64 =
      a_dtype == DType::kF64 || b_dtype == DType::kF64 || out_dtype == DType::kF64;
  if (same && a_dtype == DType::kF32) combine_direct<float>(a, b, out, count, op);
  else if (same && a_dtype == DType::kF64) combine_direct<double>(a, b, out, count, op);
  else if (any_f64) combine_converted<double>(a, a_dtype, b, b_dtype, out, out_dtype, count, op);
  else combine_converted<float>(a, a_dtype, b, b_dtype, out, out_dtype, count, op);
}

void reduce_elements(std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts,
                     std::int64_t count, DType dtype, ReduceOp op) {
  if (count <= 0 || srcs.empty() || dsts.empty()) return;
  const std::size_t es = dtype_size(dtype);
  // Each block's pointers live on the stack up to kStackPointers ranks: a small all-reduce is
  // a few hundred nanoseconds of work, to which two heap allocations per call would add.
  const std::byte* in_stack[kStackPointers];
  std::byte* out_stack[kStackPointers];
  std::vector<const std::byte*> in_heap;
  std::vector<std::byte*> out_heap;
  if (srcs.size() > kStackPointers) in_heap.resize(srcs.size());
  if (dsts.size() > kStackPointers) out_heap.resize(dsts.size());
  const std::span<const std::byte*> in(in_heap.empty() ? in_stack : in_heap.data(), srcs.size());
  const std::span<std::byte*> out(out_heap.empty() ? out_stack : out_heap.data(), dsts.size());
  for (std::int64_t begin = 0; begin < count; begin += kBlock) {
    const std::int64_t n = std::min(kBlock, count - begin);
    const std::size_t off = static_cast<std::size_t>(begin) * es;
    for (std::size_t r = 0; r < srcs.size(); ++r) in[r] = srcs[r] + off;
    for (std::size_t d = 0; d < dsts.size(); ++d) out[d] = dsts[d] + off;
    if (dtype == DType::kF64) reduce_block<double>(in, out, n, dtype, op);
    else reduce_block<float>(in, out, n, dtype, op);
  }
}

namespace {

// A copy with non-temporal stores: 64-byte lines, four 16-byte stores each (SSE2, in every
// x86-64), the destination's unaligned head and the tail copied plainly.
void stream_bytes(std::byte* dst, const std::byte* src, std::size_t bytes) {
#if defined(__SSE2__)
  const auto misalign = reinterpret_cast<std::uintptr_t>(dst) & 15;
  const std::size_t head = std::min(bytes, misalign == 0 ? 0 : 16 - misalign);
  std::memcpy(dst, src, head);
  std::size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const auto* s = reinterpret_cast<const __m128i*>(src + i);
    auto* d = reinterpret_cast<__m128i*>(dst + i);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
    const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  _mm_sfence();  // streamed stores are weakly ordered: they land before anything after this
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// "32768K" -> 33554432; 0 for anything else.
std::size_t parse_cache_size(const std::string& text) {
  std::size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + static_cast<std::size_t>(text[i] - '0');
    ++i;
  }
  if (i == 0 || value > (std::size_t{1} << 40)) return 0;
  if (i < text.size() && text[i] == 'K') return value << 10;
  if (i < text.size() && text[i] == 'M') return value << 20;
  return value;
}

std::atomic<std::size_t>& streaming_min() {
  static std::atomic<std::size_t> bytes{[] {
    const std::size_t llc = last_level_cache_bytes();
    return llc > 0 ? llc / 2 : std::size_t{16} << 20;
  }()};
  return bytes;
}

}  // namespace

std::size_t last_level_cache_bytes() {
  int best_level = 0;
  std::size_t best = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), size_file(dir + "/size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    const std::size_t bytes = parse_cache_size(size);
    if (bytes > 0 && level > best_level) best_level = level, best = bytes;
  }
  return best;
}

std::size_t streaming_copy_min_bytes() { return streaming_min().load(std::memory_order_relaxed); }

std::size_t set_streaming_copy_min_bytes(std::size_t bytes) {
  return streaming_min().exchange(bytes, std::memory_order_relaxed);
}

void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes) {
  copy_bytes(dst, src, bytes, bytes);
}

namespace {
std::atomic<std::uint64_t>& streamed_total() {
  static std::atomic<std::uint64_t> bytes{0};
  return bytes;
}
}  // namespace

bool copy_streams(std::size_t bytes, std::size_t footprint) {
  const std::size_t stream_from = streaming_copy_min_bytes();
  return stream_from > 0 && std::max(bytes, footprint) >= stream_from;
}

std::uint64_t streamed_copy_bytes() { return streamed_total().load(std::memory_order_relaxed); }

void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes, std::size_t footprint) {
  if (bytes == 0 || dst == src) return;
  if (copy_streams(bytes, footprint)) {
    stream_bytes(dst, src, bytes);
    streamed_total().fetch_add(bytes, std::memory_order_relaxed);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace mixpar::local
