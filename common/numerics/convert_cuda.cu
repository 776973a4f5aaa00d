// convert_on_device: one grid-stride kernel per (source, target) dtype pair. Each element is
// read into FP32 (or kept as FP64) with the CUDA intrinsics and written back with them, so
// nothing here shares code with formats.cpp. On sm_89+ the FP8 __NV_SATFINITE casts are the
// hardware cvt.rn.satfinite instructions (cuda_fp8.hpp); the other modes are CUDA's software.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "numerics/convert_cuda.h"
#include "numerics/cudart_check.h"

namespace mixpar {
namespace {

template <DType T> using Tag = std::integral_constant<DType, T>;

// ---- Reading one element: FP64 stays double, everything else becomes an exact float.
template <DType S> __device__ auto load(const void* p, std::size_t i) {
  if constexpr (S == DType::kF32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (S == DType::kF64) {
    return static_cast<const double*>(p)[i];
  } else if constexpr (S == DType::kF16) {
    __half_raw r;
    r.x = static_cast<const std::uint16_t*>(p)[i];
    return __half2float(__half(r));
  } else if constexpr (S == DType::kBF16) {
    __nv_bfloat16_raw r;
    r.x = static_cast<const std::uint16_t*>(p)[i];
    return __bfloat162float(__nv_bfloat16(r));
  } else {
    constexpr __nv_fp8_interpretation_t kind = S == DType::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    const auto b = static_cast<const __nv_fp8_storage_t*>(p)[i];
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, kind)));
  }
}

// ---- Writing one element from a float or a double; both round once, to nearest even.
__device__ std::uint16_t half_bits(float v) { return __half_raw(__float2half_rn(v)).x; }
__device__ std::uint16_t half_bits(double v) { return __half_raw(__double2half(v)).x; }
__device__ std::uint16_t bf16_bits(float v) {
  return __nv_bfloat16_raw(__float2bfloat16_rn(v)).x;
}
__device__ std::uint16_t bf16_bits(double v) {
  return __nv_bfloat16_raw(__double2bfloat16(v)).x;
}
__device__ __nv_fp8_storage_t fp8_bits(float v, __nv_saturation_t s,
                                       __nv_fp8_interpretation_t k) {
  return __nv_cvt_float_to_fp8(v, s, k);
}
__device__ __nv_fp8_storage_t fp8_bits(double v, __nv_saturation_t s,
                                       __nv_fp8_interpretation_t k) {
  return __nv_cvt_double_to_fp8(v, s, k);
}

template <DType D, class V>
__device__ void store(void* p, std::size_t i, V v, __nv_saturation_t sat) {
  if constexpr (D == DType::kF32) {
    static_cast<float*>(p)[i] = static_cast<float>(v);  // FP64 -> FP32: cvt.rn.f32.f64
  } else if constexpr (D == DType::kF64) {
    static_cast<double*>(p)[i] = static_cast<double>(v);
  } else if constexpr (D == DType::kF16) {
    static_cast<std::uint16_t*>(p)[i] = half_bits(v);
  } else if constexpr (D == DType::kBF16) {
    static_cast<std::uint16_t*>(p)[i] = bf16_bits(v);
  } else {
    constexpr __nv_fp8_interpretation_t kind = D == DType::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    static_cast<__nv_fp8_storage_t*>(p)[i] = fp8_bits(v, sat, kind);
  }
}

template <DType S, DType D>
__global__ void convert_kernel(const void* src, void* dst, std::size_t n,
                               __nv_saturation_t sat) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    store<D>(dst, i, load<S>(src, i), sat);
  }
}

// Calls f(Tag<t>{}) with t as a compile-time constant.
template <class F> void visit(DType t, F&& f) {
  switch (t) {
    case DType::kF32: f(Tag<DType::kF32>{}); return;
    case DType::kF16: f(Tag<DType::kF16>{}); return;
    case DType::kBF16: f(Tag<DType::kBF16>{}); return;
    case DType::kE4M3: f(Tag<DType::kE4M3>{}); return;
    case DType::kE5M2: f(Tag<DType::kE5M2>{}); return;
    case DType::kF64: f(Tag<DType::kF64>{}); return;
  }
  throw std::invalid_argument("mixpar::convert_on_device: unknown dtype");
}

}  // namespace

void convert_on_device(const void* src, DType src_type, void* dst, DType dst_type,
                       std::size_t n, Saturation sat) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  constexpr std::size_t kMaxBlocks = 65535;  // grid-stride loop covers the rest
  const std::size_t blocks = std::min<std::size_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  const __nv_saturation_t mode = sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
  visit(src_type, [&](auto s) {
    visit(dst_type, [&](auto d) {
      convert_kernel<decltype(s)::value, decltype(d)::value>
          <<<static_cast<unsigned>(blocks), kThreads>>>(src, dst, n, mode);
    });
  });
  MIXPAR_CUDART(cudaGetLastError());
  MIXPAR_CUDART(cudaDeviceSynchronize());
}

}  // namespace mixpar
