// Bulk dtype conversion on the GPU, built on the CUDA intrinsics (__float2half_rn,
// __float2bfloat16_rn, __nv_cvt_float_to_fp8 and their inverses): an implementation
// independent of formats.cpp, which the tests hold bit-identical to it. Pointers are device
// pointers; the call returns after the kernel has finished. Without CUDA it throws.
#pragma once

#include <cstddef>

#include "numerics/dtype.h"
#include "numerics/formats.h"

namespace mixpar {

// Converts n elements of src_type at `src` to dst_type at `dst` (both device memory, not
// overlapping). Every pair of dtypes is allowed; FP64 sources round once to the target
// (__double2half, __double2bfloat16, __nv_cvt_double_to_fp8). `sat` applies to FP8 targets.
// Throws std::runtime_error naming the failing CUDA call, file and line.
void convert_on_device(const void* src, DType src_type, void* dst, DType dst_type,
                       std::size_t n, Saturation sat = Saturation::kSatFinite);

}  // namespace mixpar
