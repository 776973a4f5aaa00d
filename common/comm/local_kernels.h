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
void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes);

}  // namespace mixpar::local
