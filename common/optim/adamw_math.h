// One element of AdamW, written once for the CPU optimizer (optim/adamw.cpp) and the GPU
// kernel (cuda/kernels_optim.cu), so the two cannot drift apart: the same operations in the
// same order, each rounded once to FP32. On the device every operation is an _rn intrinsic,
// which nvcc never contracts into a fused multiply-add; on the host the project compiles with
// -ffp-contract=off (common/ops/CMakeLists.txt) for the same reason. Masters and moments
// therefore agree bit for bit (tests/common/cuda_optim_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MIXPAR_HOST_DEVICE __host__ __device__
#else
#define MIXPAR_HOST_DEVICE
#endif

namespace mixpar {

struct AdamWConfig;

// The per-step constants of the update, formed in double from t (as PyTorch forms them in
// Python) and rounded to FP32 once.
struct AdamScalars {
  float decay;         // 1 - lr wd (1 for a parameter without weight decay)
  float one_minus_b1;  // lerp weight of m towards g
  float beta2, one_minus_b2;
  float step_size;     // lr / (1 - b1^t)
  float bc2_sqrt;      // sqrt(1 - b2^t)
  float eps;
};
AdamScalars adam_scalars(const AdamWConfig& config, std::int64_t t);

namespace adamw_detail {
#if defined(__CUDA_ARCH__)
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
#else
inline float mul_rn(float a, float b) { return a * b; }
inline float add_rn(float a, float b) { return a + b; }
inline float sub_rn(float a, float b) { return a - b; }
inline float div_rn(float a, float b) { return a / b; }
inline float sqrt_rn(float a) { return std::sqrt(a); }
#endif
}  // namespace adamw_detail

// theta, m, v of one element updated in place with its gradient g (unscaled and clipped):
//   theta <- theta (1 - lr wd)                      decoupled weight decay, first
//   m <- m + (1 - b1) (g - m)                       = b1 m + (1 - b1) g, as PyTorch's lerp_
//   v <- b2 v + (1 - b2) g g
//   theta <- theta - step_size m / (sqrt(v) / sqrt(1 - b2^t) + eps)    PyTorch's addcdiv_
MIXPAR_HOST_DEVICE inline void adamw_element(float& theta, float& m, float& v, float g,
                                             const AdamScalars& s) {
  using namespace adamw_detail;
  theta = mul_rn(theta, s.decay);
  m = add_rn(m, mul_rn(s.one_minus_b1, sub_rn(g, m)));
  v = add_rn(mul_rn(s.beta2, v), mul_rn(mul_rn(s.one_minus_b2, g), g));
  const float denom = add_rn(div_rn(sqrt_rn(v), s.bc2_sqrt), s.eps);
  theta = add_rn(theta, mul_rn(-s.step_size, div_rn(m, denom)));
}

}  // namespace mixpar

#undef MIXPAR_HOST_DEVICE
