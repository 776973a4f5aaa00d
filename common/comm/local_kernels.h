// The data movement of the local backend's collectives on host memory: element-wise
// reductions over ranks in a fixed order and plain copies. No data buffer is allocated:
// reductions run through small stack blocks, so nothing hides from the memory ledger. The MPI
// backend and chapter 4's ring use them too, so every reduction in the book rounds the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "comm/communicator.h"
#include "numerics/dtype.h"

namespace mixpar::local {

// For i in [0, count): dsts[*][i] = srcs[0][i] op srcs[1][i] op ... in that order. 16- and
// 8-bit inputs accumulate in FP32, f64 in double; the result is rounded once into `dtype`
// without saturation (an overflowing sum becomes inf, or NaN for e4m3). kMax propagates NaN.
// A destination may alias a source: every source is read before any destination is written.
void reduce_elements(std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts,
                     std::int64_t count, DType dtype, ReduceOp op);

// For i in [0, count): out[i] = a[i] op b[i], each array in its own dtype: accumulated in FP32
// (double when any of the three is f64) and rounded once into out's dtype without saturation;
// kMax propagates NaN and keeps a[i] on ties (so +0 max -0 is +0: the operands' order is part
// of the result). out may alias a or b element for element. This is one hop of a ring
// reduction (chapter 4's hop_combine) and the step reduce_elements repeats over ranks.
void combine_elements(const std::byte* a, DType a_dtype, const std::byte* b, DType b_dtype,
                      std::byte* out, DType out_dtype, std::int64_t count, ReduceOp op);

// memcpy that tolerates count 0 (null data) and src == dst (an in-place gather's own block).
// A copy of streaming_copy_min_bytes() or more bypasses the cache on its way out (non-temporal
// stores): a plain store first reads the destination's line into the cache (read for
// ownership) and later writes it back, so a copy too large for the cache moves its bytes
// through memory three times; streamed, twice. On the 2-core AMD EPYC this book is measured
// on, two threads each copying 32 MiB took 2.4 ms with memcpy and 1.5 ms streamed
// (ch04_ddp/PERFORMANCE.md, "Copies larger than the cache"). glibc's memcpy streams too, but
// from a threshold it derives from the cache size CPUID reports, which a virtual machine may
// misstate (320 MiB there, so it never streamed below 240 MiB). Every streamed copy ends with
// a store fence, so a flag published after it is seen after the data.
void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes);
// The same, one of the copies of a call that writes `footprint` bytes in all (an all-to-all's
// or an all-gather's output): it streams when the footprint reaches streaming_copy_min_bytes(),
// however small this copy. The call's output evicts itself from the cache all the same when
// it is written in blocks: a 2-rank all-to-all of 16 MiB copies two 8 MiB blocks a rank, and
// took 1.83-2.06 ms with them cached, 1.33-1.42 ms streamed (ch04_ddp/PERFORMANCE.md, "Copies
// larger than the cache").
void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes, std::size_t footprint);
// Whether copy_bytes streams a copy of `bytes` in a call writing `footprint` in all.
bool copy_streams(std::size_t bytes, std::size_t footprint);
// The bytes every thread's streamed copies have written since the process started (tests tell
// by it which copies streamed; non-temporal stores leave no other trace).
std::uint64_t streamed_copy_bytes();

// The size from which copy_bytes streams: half the last-level cache the kernel reports
// (/sys/devices/system/cpu/cpu0/cache), 16 MiB where it reports none; 0 never streams.
std::size_t streaming_copy_min_bytes();
// Sets it for the whole process (benchmarks compare thresholds with it); returns the old one.
std::size_t set_streaming_copy_min_bytes(std::size_t bytes);
// The last-level cache's size as the kernel reports it, or 0 where it reports none.
std::size_t last_level_cache_bytes();

}  // namespace mixpar::local
