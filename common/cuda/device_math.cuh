// Device-side helpers shared by the kernels: element <-> float conversions for f32/f16/bf16
// (all math runs in FP32; each output is rounded once, to nearest even, as the CPU layers
// do), warp reductions in a fixed butterfly order (bit-reproducible), and the dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "numerics/dtype.h"

namespace mixpar::cuda::detail {

template <class T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Every lane ends with the same value, summed in the same order on every run.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Calls f(T{}) with T the element type of a working dtype: float, __half or __nv_bfloat16.
template <class F>
void dispatch_working_type(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::kF32: f(float{}); return;
    case DType::kF16: f(__half{}); return;
    case DType::kBF16: f(__nv_bfloat16{}); return;
    default:
      throw std::invalid_argument(std::string(op) + ": dtype " + std::string(dtype_name(dt)) +
                                  " is not one of f32, f16, bf16");
  }
}

}  // namespace mixpar::cuda::detail
