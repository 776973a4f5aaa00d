// FP8 on the GPU engine: the per-tensor cast (quantize), the amax that chooses its scale, and
// the cuBLASLt FP8 GEMM, each the device twin of chapter 3's CPU emulation
// (ch03_master_weights/fp8_scaling.h, fp8_gemm.h) and tested against it
// (tests/common/cuda_fp8_test.cpp, skipped without a GPU). Host-side rules: fp8_gemm_args.h.
// Calls are asynchronous on the stream; arguments are checked on the host
// (std::invalid_argument); a device without FP8 tensor cores gets CudaError naming its
// compute capability.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/blas.h"
#include "cuda/device_tensor.h"
#include "cuda/fp8_gemm_args.h"

namespace mixpar::cuda {

// codes[i] = the saturating cast of fl32(x[i] * scale) to codes' format (e4m3 or e5m2), round
// to nearest even, out-of-range finite values and infinities to +-max, NaN to NaN: CUDA's
// __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...), which common/numerics' float_to_e4m3_bits /
// float_to_e5m2_bits reproduce bit for bit, so the codes equal fp8::quantize_with_scale's.
// x is f32 or bf16 (a bf16 value widens exactly to f32 first); `scale` is a device pointer to
// one FP32 (the scale lives on the device, where amax and the delayed update compute it).
void fp8_quantize(const DeviceTensor& x, const float* scale, DeviceTensor& codes,
                  cudaStream_t stream);

// *amax = max |x[i]| over x (f32 or bf16), NaN if any x[i] is NaN (fp8::amax's rule: a NaN
// amax keeps the previous delayed scale). A max is order-independent: the result is exact and
// reproducible. `amax` is a device pointer to one FP32, overwritten.
void fp8_amax(const DeviceTensor& x, float* amax, cudaStream_t stream);
// The same on n elements of dtype f32 or bf16 at device address x.
void fp8_amax(const void* x, DType dtype, std::int64_t n, float* amax, cudaStream_t stream);

struct Fp8GemmCall {
  Fp8GemmShape shape;
  const void* a = nullptr;  // [M, K] codes, shape.a_format
  const void* b = nullptr;  // [N, K] codes, shape.b_format
  const float* a_scale_inv = nullptr;  // device, one FP32: what a's codes are multiplied by
  const float* b_scale_inv = nullptr;
  void* out = nullptr;      // [M, N] row-major, shape.out_type; overwritten (beta = 0)
  float* amax_out = nullptr;  // device, optional: max |out| (before rounding to out_type)
  // cuBLASLt's FP8 fast-accumulation mode. Off (the default here and Transformer Engine's for
  // every GEMM but the forward one): the tensor cores' partial sums are "periodically
  // promoted to a higher precision" (FP32; cublasLt.h, CUBLASLT_MATMUL_DESC_FAST_ACCUM); on:
  // they never are, and the whole K is summed in the tensor core's narrower accumulator
  // (about 14 bits, DeepSeek-V3 §3.3.2): faster, less accurate.
  bool fast_accum = false;
};

// out = a_scale_inv b_scale_inv (a . b^T), accumulated in FP32 (CUBLAS_COMPUTE_32F). When
// amax_out is set, cuBLASLt computes it in the GEMM's epilogue (CUBLASLT_MATMUL_DESC_AMAX_D_-
// POINTER); should this cuBLASLt refuse it for the output type (CUBLAS_STATUS_INVALID_VALUE
// for amax alone), the GEMM runs without it and fp8_amax reads the stored output instead
// (the same number for f32 output; for bf16, the max of the rounded values).
void fp8_gemm(Blas& blas, const Fp8GemmCall& call);

// Throws CudaError with fp8_gemm_unsupported_reason when the current device has no FP8 tensor
// cores; the answer is cached per device.
void require_fp8_device();

}  // namespace mixpar::cuda
