// Materialised causal attention (layers::attention_forward / _backward): qkv is split into
// per-head [B, H, T, hd] copies so each product is one strided-batched cuBLAS GEMM over B*H
// heads; the T x T scores are FP32, the probabilities (att) the working dtype. The GEMMs run
// the full square, masked half included: simple, at twice the causal FLOPs.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/attention.h"
#include "cuda/check.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.h"

namespace mixpar::cuda {

using detail::from_float;
using detail::to_float;

namespace {

constexpr int kRowWarps = 8;

struct Dims {
  std::int64_t B, T, H, D, C;
};

// Part `part` of x [B, T, parts * C] (parts 3: qkv, parts 1: a [B, T, C] tensor) ->
// y [B, H, T, D]: one head's rows made contiguous for the batched GEMMs.
template <class T>
__global__ void to_heads_kernel(const T* x, T* y, Dims d, int parts, int part) {
  const std::int64_t n = d.B * d.T * d.C;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t dd = i % d.D, t = (i / d.D) % d.T, h = (i / (d.D * d.T)) % d.H;
    const std::int64_t b = i / (d.D * d.T * d.H);
    y[i] = x[(b * d.T + t) * parts * d.C + part * d.C + h * d.D + dd];
  }
}

// The inverse: y [B, H, T, D] -> part `part` of out [B, T, parts * C] (the heads side by side).
template <class T>
__global__ void merge_heads_kernel(const T* y, T* out, Dims d, int parts, int part) {
  const std::int64_t n = d.B * d.T * d.C;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t c = i % d.C, bt = i / d.C, b = bt / d.T, t = bt % d.T;
    const std::int64_t h = c / d.D, dd = c % d.D;
    out[bt * parts * d.C + part * d.C + c] = y[((b * d.H + h) * d.T + t) * d.D + dd];
  }
}

// One warp per row i of a [T, T] score block: att_ij = softmax_{j<=i}(s_ij), 0 for j > i.
// The scores are already scaled by 1/sqrt(hd) (the GEMM's alpha).
template <class T>
__global__ void causal_softmax_kernel(const float* scores, T* att, std::int64_t rows,
                                      std::int64_t Tn) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const std::int64_t i = row % Tn;
  const float* s = scores + row * Tn;
  T* p = att + row * Tn;
  float mx = -INFINITY;
  for (std::int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, s[j]);
  mx = detail::warp_max(mx);
  float sum = 0.f;
  for (std::int64_t j = lane; j <= i; j += 32) sum += expf(s[j] - mx);
  const float inv = 1.0f / detail::warp_sum(sum);  // the CPU multiplies by 1/sum too
  for (std::int64_t j = lane; j < Tn; j += 32) {
    p[j] = from_float<T>(j <= i ? expf(s[j] - mx) * inv : 0.f);
  }
}

// One warp per row: ds_ij = scale p_ij (dp_ij - sum_k p_ik dp_ik) for j <= i, 0 above.
template <class T>
__global__ void causal_softmax_backward_kernel(const T* att, const float* dp, T* ds,
                                               std::int64_t rows, std::int64_t Tn, float scale) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const std::int64_t i = row % Tn;
  const T* p = att + row * Tn;
  const float* g = dp + row * Tn;
  float dot = 0.f;
  for (std::int64_t j = lane; j <= i; j += 32) dot += to_float(p[j]) * g[j];
  dot = detail::warp_sum(dot);
  T* out = ds + row * Tn;
  for (std::int64_t j = lane; j < Tn; j += 32) {
    out[j] = from_float<T>(j <= i ? scale * to_float(p[j]) * (g[j] - dot) : 0.f);
  }
}

Dims check_qkv(const DeviceTensor& qkv, std::int64_t n_head, const char* op) {
  if (qkv.ndim() != 3 || qkv.dim(2) % 3 != 0 || n_head <= 0 || (qkv.dim(2) / 3) % n_head != 0) {
    throw std::invalid_argument(std::string(op) + ": qkv " + shape_str(qkv.shape()) +
                                " is not [B, T, 3C] with C a multiple of " +
                                std::to_string(n_head) + " heads");
  }
  const std::int64_t C = qkv.dim(2) / 3;
  return {qkv.dim(0), qkv.dim(1), n_head, C / n_head, C};
}

void check_tensor(const DeviceTensor& t, const Shape& shape, DType dt, const char* op,
                  const char* name) {
  if (t.shape() != shape || t.dtype() != dt) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' is " + shape_str(t.shape()) +
                                " " + std::string(dtype_name(t.dtype())) + ", expected " +
                                shape_str(shape) + " " + std::string(dtype_name(dt)));
  }
}

// Batched row-major GEMM over the B*H heads: out_i = alpha op(a_i) op(b_i).
void batched(Blas& blas, const Dims& d, const DeviceTensor& a, const DeviceTensor& b,
             DeviceTensor& out, std::int64_t M, std::int64_t N, std::int64_t K, bool ta, bool tb,
             float alpha) {
  GemmCall c = gemm_call({M, N, K, ta, tb, 0, 0, 0}, a, b, out);
  c.alpha = alpha;
  c.batch = d.B * d.H;
  c.stride_a = M * K;
  c.stride_b = K * N;
  c.stride_out = M * N;
  blas.gemm(c);
}

template <class Kernel, class... Args>
void launch_elements(std::int64_t n, cudaStream_t stream, Kernel kernel, Args... args) {
  const LaunchConfig cfg = launch_1d(n);
  if (cfg.grid == 0) return;
  kernel<<<cfg.grid, cfg.block, 0, stream>>>(args...);
  MIXPAR_CUDA_CHECK_LAUNCH();
}

template <class T>
void split_qkv(const DeviceTensor& qkv, DeviceTensor& q, DeviceTensor& k, DeviceTensor& v,
               const Dims& d, cudaStream_t s) {
  int part = 0;
  for (DeviceTensor* dst : {&q, &k, &v}) {
    launch_elements(d.B * d.T * d.C, s, to_heads_kernel<T>, static_cast<const T*>(qkv.data()),
                    static_cast<T*>(dst->data()), d, 3, part++);
  }
}

}  // namespace

void attention_forward(Blas& blas, const DeviceTensor& qkv, std::int64_t n_head,
                       DeviceTensor& out, DeviceTensor& att) {
  const char* op = "cuda::attention_forward";
  const Dims d = check_qkv(qkv, n_head, op);
  const DType dt = qkv.dtype();
  check_tensor(out, {d.B, d.T, d.C}, dt, op, "out");
  check_tensor(att, {d.B, d.H, d.T, d.T}, dt, op, "att");
  cudaStream_t s = blas.stream();
  const Shape heads = {d.B, d.H, d.T, d.D};
  DeviceTensor q = DeviceTensor::empty(heads, dt), k = DeviceTensor::empty(heads, dt);
  DeviceTensor v = DeviceTensor::empty(heads, dt), y = DeviceTensor::empty(heads, dt);
  DeviceTensor scores = DeviceTensor::empty({d.B, d.H, d.T, d.T}, DType::kF32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  detail::dispatch_working_type(dt, op, [&](auto tag) {
    using T = decltype(tag);
    split_qkv<T>(qkv, q, k, v, d, s);
    batched(blas, d, q, k, scores, d.T, d.T, d.D, false, true, scale);  // scale q k^T
    const LaunchConfig rows = launch_rows(d.B * d.H * d.T, kRowWarps);
    if (rows.grid > 0) {
      causal_softmax_kernel<T><<<rows.grid, rows.block, 0, s>>>(
          scores.f32(), static_cast<T*>(att.data()), d.B * d.H * d.T, d.T);
      MIXPAR_CUDA_CHECK_LAUNCH();
    }
    batched(blas, d, att, v, y, d.T, d.D, d.T, false, false, 1.0f);  // P v
    launch_elements(d.B * d.T * d.C, s, merge_heads_kernel<T>, static_cast<const T*>(y.data()),
                    static_cast<T*>(out.data()), d, 1, 0);
  });
}

void attention_backward(Blas& blas, const DeviceTensor& dout, const DeviceTensor& qkv,
                        const DeviceTensor& att, std::int64_t n_head, DeviceTensor& dqkv) {
  const char* op = "cuda::attention_backward";
  const Dims d = check_qkv(qkv, n_head, op);
  const DType dt = qkv.dtype();
  check_tensor(dout, {d.B, d.T, d.C}, dt, op, "dout");
  check_tensor(att, {d.B, d.H, d.T, d.T}, dt, op, "att");
  check_tensor(dqkv, qkv.shape(), dt, op, "dqkv");
  cudaStream_t s = blas.stream();
  const Shape heads = {d.B, d.H, d.T, d.D};
  DeviceTensor q = DeviceTensor::empty(heads, dt), k = DeviceTensor::empty(heads, dt);
  DeviceTensor v = DeviceTensor::empty(heads, dt), dy = DeviceTensor::empty(heads, dt);
  DeviceTensor dq = DeviceTensor::empty(heads, dt), dk = DeviceTensor::empty(heads, dt);
  DeviceTensor dv = DeviceTensor::empty(heads, dt);
  DeviceTensor dp = DeviceTensor::empty({d.B, d.H, d.T, d.T}, DType::kF32);
  DeviceTensor ds = DeviceTensor::empty({d.B, d.H, d.T, d.T}, dt);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const std::int64_t n = d.B * d.T * d.C;
  detail::dispatch_working_type(dt, op, [&](auto tag) {
    using T = decltype(tag);
    split_qkv<T>(qkv, q, k, v, d, s);
    launch_elements(n, s, to_heads_kernel<T>, static_cast<const T*>(dout.data()),
                    static_cast<T*>(dy.data()), d, 1, 0);
    batched(blas, d, att, dy, dv, d.T, d.D, d.T, true, false, 1.0f);  // dv = P^T dy
    batched(blas, d, dy, v, dp, d.T, d.T, d.D, false, true, 1.0f);    // dp = dy v^T (FP32)
    const LaunchConfig rows = launch_rows(d.B * d.H * d.T, kRowWarps);
    if (rows.grid > 0) {
      causal_softmax_backward_kernel<T><<<rows.grid, rows.block, 0, s>>>(
          static_cast<const T*>(att.data()), dp.f32(), static_cast<T*>(ds.data()),
          d.B * d.H * d.T, d.T, scale);
      MIXPAR_CUDA_CHECK_LAUNCH();
    }
    batched(blas, d, ds, k, dq, d.T, d.D, d.T, false, false, 1.0f);  // dq = dS k
    batched(blas, d, ds, q, dk, d.T, d.D, d.T, true, false, 1.0f);   // dk = dS^T q
    int part = 0;
    for (const DeviceTensor* g : {&dq, &dk, &dv}) {
      launch_elements(n, s, merge_heads_kernel<T>, static_cast<const T*>(g->data()),
                      static_cast<T*>(dqkv.data()), d, 3, part++);
    }
  });
}

}  // namespace mixpar::cuda
