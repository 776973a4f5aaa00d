// Elementwise kernels: GELU (tanh form) forward/backward (layers::gelu_forward / _backward),
// the residual add (layers::residual_forward) and the bias add (ops::bias_add). Memory-bound:
// each thread moves 16-byte packs (8 bf16 or 4 floats) when every pointer is 16-byte aligned,
// with a scalar tail; the math is the CPU's, in FP32, rounded once.
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

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// s = sigmoid(2u) = 0.5 (1 + tanh u) and 1 - s, u = k (x + a x^3), from one exp(-2|u|) <= 1:
// no overflow and no cancellation (the CPU's formulation, common/model/layers_norm.cpp).
__device__ __forceinline__ void gelu_sigmoid(float x, float& s, float& one_minus_s) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  const float e = expf(-2.0f * fabsf(u));
  const float big = 1.0f / (1.0f + e);
  const float small = e * big;
  s = u >= 0.f ? big : small;
  one_minus_s = u >= 0.f ? small : big;
}

struct GeluForward {
  __device__ float operator()(float x, float /*unused*/) const {
    float s, oms;
    gelu_sigmoid(x, s, oms);
    return x * s;
  }
};

// dx = dout [s + 2 x s (1 - s) du/dx]; in the far tails s (1 - s) is exactly 0 while x du/dx
// may overflow, so the term is then dropped (0, not NaN), as on the CPU.
struct GeluBackward {
  __device__ float operator()(float x, float dout) const {
    float s, oms;
    gelu_sigmoid(x, s, oms);
    const float tail = s * oms;
    const float du = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    const float grad = tail == 0.f ? s : s + 2.0f * x * tail * du;
    return dout * grad;
  }
};

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// out[i] = op(a[i], b[i]); out may alias a or b (each element is read, then written, by one
// thread). vec: all three pointers are 16-byte aligned, so the bulk moves as packs.
template <class T, class Op>
__global__ void binary_kernel(const T* a, const T* b, T* out, std::int64_t n, bool vec, Op op) {
  constexpr int kVec = Pack<T>::kSize;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t n_vec = vec ? n / kVec : 0;
  for (std::int64_t i = tid; i < n_vec; i += stride) {
    const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[i];
    const Pack<T> pb = reinterpret_cast<const Pack<T>*>(b)[i];
    Pack<T> po;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      po.v[k] = from_float<T>(op(to_float(pa.v[k]), to_float(pb.v[k])));
    reinterpret_cast<Pack<T>*>(out)[i] = po;
  }
  for (std::int64_t i = n_vec * kVec + tid; i < n; i += stride) {
    out[i] = from_float<T>(op(to_float(a[i]), to_float(b[i])));
  }
}

// y [R, N] += b[col] for every row.
template <class T>
__global__ void bias_add_kernel(T* y, const T* b, std::int64_t n, std::int64_t N) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = from_float<T>(to_float(y[i]) + to_float(b[i % N]));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void check_like(const DeviceTensor& t, const DeviceTensor& ref, const char* op, const char* name) {
  if (!t.defined() || t.dtype() != ref.dtype() || t.numel() != ref.numel()) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' must be " +
                                std::string(dtype_name(ref.dtype())) + " with " +
                                std::to_string(ref.numel()) + " elements");
  }
}

template <class Op>
void launch_binary(const DeviceTensor& a, const DeviceTensor& b, DeviceTensor& out,
                   cudaStream_t stream, const char* op_name, Op op) {
  check_like(b, a, op_name, "second input");
  check_like(out, a, op_name, "out");
  const std::int64_t n = a.numel();
  const bool vec = aligned16(a.data()) && aligned16(b.data()) && aligned16(out.data());
  detail::dispatch_working_type(a.dtype(), op_name, [&](auto tag) {
    using T = decltype(tag);
    const LaunchConfig cfg = launch_1d(n, 256, vec ? Pack<T>::kSize : 1);
    if (cfg.grid == 0) return;
    binary_kernel<T, Op><<<cfg.grid, cfg.block, 0, stream>>>(
        static_cast<const T*>(a.data()), static_cast<const T*>(b.data()),
        static_cast<T*>(out.data()), n, vec, op);
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void gelu_forward(const DeviceTensor& x, DeviceTensor& out, cudaStream_t stream) {
  launch_binary(x, x, out, stream, "cuda::gelu_forward", GeluForward{});
}

void gelu_backward(const DeviceTensor& x, const DeviceTensor& dout, DeviceTensor& dx,
                   cudaStream_t stream) {
  launch_binary(x, dout, dx, stream, "cuda::gelu_backward", GeluBackward{});
}

void residual_forward(const DeviceTensor& a, const DeviceTensor& b, DeviceTensor& out,
                      cudaStream_t stream) {
  launch_binary(a, b, out, stream, "cuda::residual_forward", Add{});
}

void bias_add(DeviceTensor& y, const DeviceTensor& b, cudaStream_t stream) {
  const char* op = "cuda::bias_add";
  if (y.ndim() != 2 || b.numel() != y.dim(1) || b.dtype() != y.dtype()) {
    throw std::invalid_argument(std::string(op) + ": y " + shape_str(y.shape()) + " and b " +
                                shape_str(b.shape()) + " (same dtype, b [N] for y [R, N])");
  }
  const LaunchConfig cfg = launch_1d(y.numel());
  if (cfg.grid == 0) return;
  detail::dispatch_working_type(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    bias_add_kernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
        static_cast<T*>(y.data()), static_cast<const T*>(b.data()), y.numel(), y.dim(1));
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mixpar::cuda
