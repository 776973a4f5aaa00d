// The data movement of the local backend's collectives on host memory: element-wise
// reductions over ranks in a fixed order and plain copies. No data buffer is allocated:
// reductions run through small stack blocks, so nothing hides from the memory ledger.
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

// memcpy that tolerates count 0 (null data) and src == dst (an in-place gather's own block).
void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes);

}  // namespace mixpar::local
