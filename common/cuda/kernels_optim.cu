// Optimizer-side kernels: AdamW on FP32 master weights with the 16-bit re-cast fused
// (AdamW::step), the loss scaler's fused inf/NaN check and unscale (LossScaler::
// unscale_and_check), the plain check (LossScaler::found_inf), and the FP64 sum of squares of
// the global gradient norm (ops::sum_of_squares). The found_inf flag stays on the device.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/device_math.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"

namespace mixpar::cuda {

using detail::from_float;
using detail::to_float;

namespace {

// The sum of squares always runs this grid: a fixed partition is what makes the FP64 sum the
// same on every run (and on every GPU), whatever the number of multiprocessors.
constexpr int kNormBlocks = 1024;
constexpr int kNormThreads = 256;

// One element of AdamW: adamw_element (optim/adamw_math.h), the CPU's update itself, on _rn
// intrinsics that nvcc never contracts into an FMA, so each step rounds exactly as the CPU's.
template <class TG, class TP>
__global__ void adamw_kernel(float* master, const TG* grad, float* m, float* v, TP* param16,
                             std::int64_t n, AdamScalars s, float gs1, float gs2,
                             const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;  // the loss scaler found inf/NaN: no step
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float g = to_float(grad[i]);
    if (gs1 != 1.f) g = __fmul_rn(g, gs1);  // unscale
    if (gs2 != 1.f) g = __fmul_rn(g, gs2);  // clip
    float p = master[i], mi = m[i], vi = v[i];
    adamw_element(p, mi, vi, g, s);
    master[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (param16 != nullptr) param16[i] = from_float<TP>(p);
  }
}

// found_inf is only ever set to 1 (several threads may write the same value: benign).
__global__ void unscale_and_check_kernel(float* g, std::int64_t n, float inv_scale,
                                         float* found_inf) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = g[i];
    bad |= !isfinite(x);
    if (inv_scale != 1.f) g[i] = x * inv_scale;
  }
  if (bad) *found_inf = 1.f;
}

template <class T>
__global__ void check_finite_kernel(const T* x, std::int64_t n, float* found_inf) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    bad |= !isfinite(to_float(x[i]));
  }
  if (bad) *found_inf = 1.f;
}

__device__ double block_sum_double(double v) {
  __shared__ double smem[32];
  v = detail::warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  double r = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : 0.0;
  return detail::warp_sum(r);
}

// Pass 1: each of kNormBlocks blocks sums the squares of its grid-stride share into partial.
template <class T>
__global__ void sum_of_squares_kernel(const T* x, std::int64_t n, double* partial) {
  double s = 0.0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double d = static_cast<double>(to_float(x[i]));
    s += d * d;
  }
  s = block_sum_double(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Pass 2: one block adds the partials.
__global__ void sum_partials_kernel(const double* partial, int count, double* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum_double(s);
  if (threadIdx.x == 0) out[0] = s;
}

void check_flag(const DeviceTensor& flag, const char* op) {
  if (!flag.defined() || flag.dtype() != DType::kF32 || flag.numel() != 1) {
    throw std::invalid_argument(std::string(op) + ": 'found_inf' must be f32 [1]");
  }
}

}  // namespace

void adamw_update(DeviceTensor& master, const DeviceTensor& grad, DeviceTensor& m,
                  DeviceTensor& v, DeviceTensor* param16, const AdamScalars& s,
                  float grad_scale1, float grad_scale2, const DeviceTensor* skip,
                  cudaStream_t stream) {
  const char* op = "cuda::adamw_update";
  const std::int64_t n = master.numel();
  for (const DeviceTensor* t : {&master, &m, &v}) {
    if (t->dtype() != DType::kF32 || t->numel() != n) {
      throw std::invalid_argument(std::string(op) + ": master, m and v must be f32 of one size");
    }
  }
  if (grad.numel() != n || (param16 && param16->numel() != n)) {
    throw std::invalid_argument(std::string(op) + ": grad and param16 must have " +
                                std::to_string(n) + " elements");
  }
  if (skip) check_flag(*skip, op);
  const LaunchConfig cfg = launch_1d(n);
  if (cfg.grid == 0) return;
  const float* pskip = skip ? skip->f32() : nullptr;
  detail::dispatch_working_type(grad.dtype(), op, [&](auto gtag) {
    using TG = decltype(gtag);
    const TG* pg = static_cast<const TG*>(grad.data());
    auto launch = [&](auto ptag) {
      using TP = decltype(ptag);
      TP* pp = param16 ? static_cast<TP*>(param16->data()) : nullptr;
      adamw_kernel<TG, TP><<<cfg.grid, cfg.block, 0, stream>>>(
          master.f32(), pg, m.f32(), v.f32(), pp, n, s, grad_scale1, grad_scale2, pskip);
      MIXPAR_CUDA_CHECK_LAUNCH();
    };
    if (param16 == nullptr) {
      launch(float{});  // no 16-bit copy: the type is unused
    } else {
      detail::dispatch_working_type(param16->dtype(), op, launch);
    }
  });
}

void unscale_and_check(DeviceTensor& grads, float inv_scale, DeviceTensor& found_inf,
                       cudaStream_t stream) {
  const char* op = "cuda::unscale_and_check";
  check_flag(found_inf, op);
  const LaunchConfig cfg = launch_1d(grads.numel());
  if (cfg.grid == 0) return;
  unscale_and_check_kernel<<<cfg.grid, cfg.block, 0, stream>>>(grads.f32(), grads.numel(),
                                                               inv_scale, found_inf.f32());
  MIXPAR_CUDA_CHECK_LAUNCH();
}

void check_finite(const DeviceTensor& x, DeviceTensor& found_inf, cudaStream_t stream) {
  const char* op = "cuda::check_finite";
  check_flag(found_inf, op);
  const LaunchConfig cfg = launch_1d(x.numel());
  if (cfg.grid == 0) return;
  detail::dispatch_working_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    check_finite_kernel<T><<<cfg.grid, cfg.block, 0, stream>>>(static_cast<const T*>(x.data()),
                                                               x.numel(), found_inf.f32());
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

void sum_of_squares(const DeviceTensor& x, DeviceTensor& out, cudaStream_t stream) {
  const char* op = "cuda::sum_of_squares";
  if (!out.defined() || out.dtype() != DType::kF64 || out.numel() != 1) {
    throw std::invalid_argument(std::string(op) + ": 'out' must be f64 [1]");
  }
  DeviceTensor partial = DeviceTensor::empty({kNormBlocks}, DType::kF64);
  detail::dispatch_working_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    sum_of_squares_kernel<T><<<kNormBlocks, kNormThreads, 0, stream>>>(
        static_cast<const T*>(x.data()), x.numel(), partial.f64());
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(partial.f64(), kNormBlocks, out.f64());
  MIXPAR_CUDA_CHECK_LAUNCH();
}

}  // namespace mixpar::cuda
