// The FP8 cast and amax kernels (fp8.h). Both are memory-bound grid-stride loops.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/fp8.h"
#include "cuda/launch.h"

namespace mixpar::cuda {

namespace {

__device__ __forceinline__ float load(const float* x, std::int64_t i) { return x[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* x, std::int64_t i) {
  return __bfloat162float(x[i]);  // exact: bf16 is a truncated f32
}

// One multiply, rounded to FP32 (no FMA to contract into), then CUDA's saturating cast.
template <class T>
__global__ void quantize_kernel(const T* x, const float* scale, __nv_fp8_storage_t* codes,
                                std::int64_t n, __nv_fp8_interpretation_t format) {
  const float s = *scale;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const float v = __fmul_rn(load(x, i), s);
    codes[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, format);
  }
}

// |x| as its FP32 bit pattern: for non-negative floats the unsigned order is the numeric order,
// and every NaN (exponent all ones, mantissa nonzero) sorts above +inf, so an unsigned max
// propagates NaN as fp8::amax does.
template <class T>
__global__ void amax_kernel(const T* x, std::int64_t n, unsigned int* out) {
  unsigned int m = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    m = max(m, __float_as_uint(load(x, i)) & 0x7FFFFFFFu);
  }
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ unsigned int warp_max[32];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < static_cast<int>(blockDim.x / kWarpSize) ? warp_max[lane] : 0u;
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) atomicMax(out, m);
  }
}

__nv_fp8_interpretation_t interpretation(DType t) {
  switch (t) {
    case DType::kE4M3: return __NV_E4M3;
    case DType::kE5M2: return __NV_E5M2;
    default:
      throw std::invalid_argument("fp8_quantize: codes must be e4m3 or e5m2, not " +
                                  std::string(dtype_name(t)));
  }
}

void check_source(const DeviceTensor& x) {
  if (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16) {
    throw std::invalid_argument("fp8_quantize: x must be f32 or bf16, not " +
                                std::string(dtype_name(x.dtype())));
  }
}

}  // namespace

void fp8_quantize(const DeviceTensor& x, const float* scale, DeviceTensor& codes,
                  cudaStream_t stream) {
  check_source(x);
  const __nv_fp8_interpretation_t format = interpretation(codes.dtype());
  if (codes.numel() != x.numel()) {
    throw std::invalid_argument("fp8_quantize: " + std::to_string(x.numel()) +
                                " values into " + std::to_string(codes.numel()) + " codes");
  }
  if (scale == nullptr) throw std::invalid_argument("fp8_quantize: scale is null");
  const LaunchConfig cfg = launch_1d(x.numel());
  if (cfg.grid == 0) return;
  auto* out = static_cast<__nv_fp8_storage_t*>(codes.data());
  if (x.dtype() == DType::kF32) {
    quantize_kernel<<<cfg.grid, cfg.block, 0, stream>>>(x.f32(), scale, out, x.numel(), format);
  } else {
    quantize_kernel<<<cfg.grid, cfg.block, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x.data()), scale, out, x.numel(), format);
  }
  MIXPAR_CUDA_CHECK_LAUNCH();
}

void fp8_amax(const void* x, DType dtype, std::int64_t n, float* amax, cudaStream_t stream) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    throw std::invalid_argument("fp8_amax: x must be f32 or bf16, not " +
                                std::string(dtype_name(dtype)));
  }
  if (amax == nullptr || (x == nullptr && n > 0)) {
    throw std::invalid_argument("fp8_amax: null pointer");
  }
  MIXPAR_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));  // +0.0f: bits 0
  const LaunchConfig cfg = launch_1d(n, 256, 1, 1024);
  if (cfg.grid == 0) return;
  auto* out = reinterpret_cast<unsigned int*>(amax);
  if (dtype == DType::kF32) {
    amax_kernel<<<cfg.grid, cfg.block, 0, stream>>>(static_cast<const float*>(x), n, out);
  } else {
    amax_kernel<<<cfg.grid, cfg.block, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n, out);
  }
  MIXPAR_CUDA_CHECK_LAUNCH();
}

void fp8_amax(const DeviceTensor& x, float* amax, cudaStream_t stream) {
  fp8_amax(x.data(), x.dtype(), x.numel(), amax, stream);
}

}  // namespace mixpar::cuda
