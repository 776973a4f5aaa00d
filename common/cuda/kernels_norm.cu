// LayerNorm forward/backward (layers::layernorm_forward / _backward) and the column sums that
// give bias and LayerNorm weight gradients (ops::bias_grad). One warp per row for the row-wise
// parts; column sums in two fixed-order passes (chunks of rows, then the chunks), so every
// gradient is bit-reproducible: no atomics anywhere.
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
using detail::warp_sum;

namespace {

constexpr int kRowWarps = 8;         // rows (warps) per block of the row kernels
constexpr int kColumnThreads = 256;  // columns per block of the column sums
constexpr std::int64_t kRowsPerChunk = 256;

// ---- forward: x [N, C] -> out [N, C], mean [N], rstd [N]. Two passes over the row (mean, then
// squared deviations) like the CPU: no cancellation for rows with a large mean.
template <class T>
__global__ void layernorm_forward_kernel(const T* x, const T* w, const T* b, T* out, float* mean,
                                         float* rstd, std::int64_t N, int C, float eps) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  float s = 0.f;
  for (int i = lane; i < C; i += 32) s += to_float(xr[i]);
  const float mu = warp_sum(s) / static_cast<float>(C);
  float q = 0.f;
  for (int i = lane; i < C; i += 32) {
    const float d = to_float(xr[i]) - mu;
    q += d * d;
  }
  const float var = warp_sum(q) / static_cast<float>(C);
  const float rs = 1.0f / sqrtf(var + eps);
  T* orow = out + row * C;
  for (int i = lane; i < C; i += 32) {
    orow[i] = from_float<T>((to_float(xr[i]) - mu) * rs * to_float(w[i]) + to_float(b[i]));
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// ---- backward, dx part: dx += (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) rstd, dnorm = g w.
template <class T>
__global__ void layernorm_dx_kernel(const T* dout, const T* x, const T* w, const float* mean,
                                    const float* rstd, T* dx, std::int64_t N, int C) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  const T* gr = dout + row * C;
  const float mu = mean[row], rs = rstd[row];
  float sum_dnorm = 0.f, sum_dnorm_xhat = 0.f;
  for (int i = lane; i < C; i += 32) {
    const float dnorm = to_float(gr[i]) * to_float(w[i]);
    sum_dnorm += dnorm;
    sum_dnorm_xhat += dnorm * ((to_float(xr[i]) - mu) * rs);
  }
  const float dnorm_mean = warp_sum(sum_dnorm) / static_cast<float>(C);
  const float dnorm_xhat_mean = warp_sum(sum_dnorm_xhat) / static_cast<float>(C);
  T* dxr = dx + row * C;
  for (int i = lane; i < C; i += 32) {
    const float xhat = (to_float(xr[i]) - mu) * rs;
    const float dnorm = to_float(gr[i]) * to_float(w[i]);
    const float d = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * rs;
    dxr[i] = from_float<T>(to_float(dxr[i]) + d);
  }
}

// ---- column sums, pass 1: chunk blockIdx.y of the rows, one thread per column, rows in order.
// pb[chunk, col] = sum dy; with kXhat also pw[chunk, col] = sum dy * xhat.
template <class T, bool kXhat>
__global__ void column_partials_kernel(const T* dy, const T* x, const float* mean,
                                       const float* rstd, float* pw, float* pb, std::int64_t R,
                                       std::int64_t N) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= N) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kRowsPerChunk;
  const std::int64_t r1 = r0 + kRowsPerChunk < R ? r0 + kRowsPerChunk : R;
  float sw = 0.f, sb = 0.f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float g = to_float(dy[r * N + col]);
    sb += g;
    if constexpr (kXhat) sw += g * ((to_float(x[r * N + col]) - mean[r]) * rstd[r]);
  }
  pb[blockIdx.y * N + col] = sb;
  if constexpr (kXhat) pw[blockIdx.y * N + col] = sw;
}

// ---- column sums, pass 2: the chunks in order; out (+)= the sum, rounded once. out may be null.
template <class T>
__global__ void column_finish_kernel(const float* partial, T* out, std::int64_t chunks,
                                     std::int64_t N, bool accumulate) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= N) return;
  float s = 0.f;
  for (std::int64_t c = 0; c < chunks; ++c) s += partial[c * N + col];
  out[col] = from_float<T>(accumulate ? to_float(out[col]) + s : s);
}

void check_same(const DeviceTensor& t, DType dt, std::int64_t numel, const char* op,
                const char* name) {
  if (!t.defined() || t.dtype() != dt || t.numel() != numel) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' must be " +
                                std::string(dtype_name(dt)) + " with " + std::to_string(numel) +
                                " elements" +
                                (t.defined() ? ", is " + std::string(dtype_name(t.dtype())) +
                                                   " " + shape_str(t.shape())
                                             : ", is undefined"));
  }
}

struct Rows {
  std::int64_t n;
  int c;
};
Rows check_layernorm(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& mean,
                     const DeviceTensor& rstd, const char* op) {
  const std::int64_t c = w.numel();
  if (c == 0 || x.ndim() < 1 || x.dim(-1) != c || c > (1 << 30)) {
    throw std::invalid_argument(std::string(op) + ": x " + shape_str(x.shape()) +
                                " does not end in w's size " + std::to_string(c));
  }
  const std::int64_t n = x.numel() / c;
  check_same(w, x.dtype(), c, op, "w");
  check_same(mean, DType::kF32, n, op, "mean");
  check_same(rstd, DType::kF32, n, op, "rstd");
  return {n, static_cast<int>(c)};
}

// Column sums of dy [R, N] (and of dy * xhat when x is given) into out_b (and out_w).
void column_sums(const DeviceTensor& dy, const DeviceTensor* x, const DeviceTensor* mean,
                 const DeviceTensor* rstd, DeviceTensor* out_w, DeviceTensor& out_b,
                 std::int64_t R, std::int64_t N, bool accumulate, cudaStream_t stream) {
  const std::int64_t chunks = column_chunks(R, kRowsPerChunk);
  if (chunks > 65535) throw std::invalid_argument("column sums: more than 2^24 rows");
  if (R == 0 || N == 0) {
    if (!accumulate && N > 0) {
      out_b.zero(stream);
      if (out_w) out_w->zero(stream);
    }
    return;
  }
  DeviceTensor pb = DeviceTensor::empty({chunks, N}, DType::kF32);
  DeviceTensor pw = x ? DeviceTensor::empty({chunks, N}, DType::kF32) : DeviceTensor();
  const dim3 grid1(static_cast<unsigned>(ceil_div(N, kColumnThreads)),
                   static_cast<unsigned>(chunks));
  const unsigned grid2 = static_cast<unsigned>(ceil_div(N, kColumnThreads));
  detail::dispatch_working_type(dy.dtype(), "column sums", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = static_cast<const T*>(dy.data());
    if (x) {
      column_partials_kernel<T, true><<<grid1, kColumnThreads, 0, stream>>>(
          pdy, static_cast<const T*>(x->data()), mean->f32(), rstd->f32(), pw.f32(), pb.f32(), R,
          N);
      MIXPAR_CUDA_CHECK_LAUNCH();
      column_finish_kernel<T><<<grid2, kColumnThreads, 0, stream>>>(
          pw.f32(), static_cast<T*>(out_w->data()), chunks, N, accumulate);
      MIXPAR_CUDA_CHECK_LAUNCH();
    } else {
      column_partials_kernel<T, false><<<grid1, kColumnThreads, 0, stream>>>(
          pdy, nullptr, nullptr, nullptr, nullptr, pb.f32(), R, N);
      MIXPAR_CUDA_CHECK_LAUNCH();
    }
    column_finish_kernel<T><<<grid2, kColumnThreads, 0, stream>>>(
        pb.f32(), static_cast<T*>(out_b.data()), chunks, N, accumulate);
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
  // pb and pw go back to the allocator here; kernels later on this stream that reuse the
  // blocks run after the ones above (one stream: see caching_allocator.h).
}

}  // namespace

void layernorm_forward(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& b,
                       DeviceTensor& out, DeviceTensor& mean, DeviceTensor& rstd,
                       cudaStream_t stream, float eps) {
  const char* op = "cuda::layernorm_forward";
  const Rows d = check_layernorm(x, w, mean, rstd, op);
  check_same(b, x.dtype(), d.c, op, "b");
  check_same(out, x.dtype(), x.numel(), op, "out");
  const LaunchConfig cfg = launch_rows(d.n, kRowWarps);
  if (cfg.grid == 0) return;
  detail::dispatch_working_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
        static_cast<const T*>(x.data()), static_cast<const T*>(w.data()),
        static_cast<const T*>(b.data()), static_cast<T*>(out.data()), mean.f32(), rstd.f32(),
        d.n, d.c, eps);
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_backward(const DeviceTensor& dout, const DeviceTensor& x, const DeviceTensor& w,
                        const DeviceTensor& mean, const DeviceTensor& rstd, DeviceTensor& dx,
                        DeviceTensor& dw, DeviceTensor& db, bool accumulate,
                        cudaStream_t stream) {
  const char* op = "cuda::layernorm_backward";
  const Rows d = check_layernorm(x, w, mean, rstd, op);
  check_same(dout, x.dtype(), x.numel(), op, "dout");
  check_same(dx, x.dtype(), x.numel(), op, "dx");
  check_same(dw, x.dtype(), d.c, op, "dw");
  check_same(db, x.dtype(), d.c, op, "db");
  const LaunchConfig cfg = launch_rows(d.n, kRowWarps);
  if (cfg.grid > 0) {
    detail::dispatch_working_type(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      layernorm_dx_kernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
          static_cast<const T*>(dout.data()), static_cast<const T*>(x.data()),
          static_cast<const T*>(w.data()), mean.f32(), rstd.f32(), static_cast<T*>(dx.data()),
          d.n, d.c);
      MIXPAR_CUDA_CHECK_LAUNCH();
    });
  }
  column_sums(dout, &x, &mean, &rstd, &dw, db, d.n, d.c, accumulate, stream);
}

void bias_grad(const DeviceTensor& dy, DeviceTensor& db, bool accumulate, cudaStream_t stream) {
  const char* op = "cuda::bias_grad";
  if (dy.ndim() != 2) {
    throw std::invalid_argument(std::string(op) + ": dy " + shape_str(dy.shape()) + " is not 2-D");
  }
  check_same(db, dy.dtype(), dy.dim(1), op, "db");
  column_sums(dy, nullptr, nullptr, nullptr, nullptr, db, dy.dim(0), dy.dim(1), accumulate,
              stream);
}

}  // namespace mixpar::cuda
