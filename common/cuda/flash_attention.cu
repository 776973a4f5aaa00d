// Fused causal attention after FlashAttention-2 (layers::attention_forward / _backward): 32 x 32
// tiles in shared memory, FP32 math, an online softmax (running max and sum per row, the partial
// output rescaled as the max grows), no T x T matrix in memory. Backward recomputes P from the
// log-sum-exp; dK/dV per key tile and dQ per query tile are separate kernels: no atomics.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/attention.h"
#include "cuda/check.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.h"

namespace mixpar::cuda {

using detail::from_float;
using detail::to_float;

namespace {

constexpr int kTile = 32;      // query rows and key rows per tile
constexpr int kThreads = 128;  // 4 threads per tile row: thread t owns row t / 4

// Shared memory per block: kTile-row tiles of D + 1 floats (the +1 pad spreads rows over
// banks), kTile x (kTile + 1) tiles of P or dS, and kTile row statistics. The arrays are
// dynamic: static __shared__ arrays stop at 48 KiB per block, and the dK/dV kernel needs
// 41 KiB at D = 64 but 73 KiB at D = 128 (GPT-3 style heads). Above 48 KiB the kernel opts in
// (cudaFuncAttributeMaxDynamicSharedMemorySize), up to the device's limit (227 KiB on Hopper).
constexpr std::size_t tile_floats(int D) { return static_cast<std::size_t>(kTile) * (D + 1); }
constexpr std::size_t square_floats() { return static_cast<std::size_t>(kTile) * (kTile + 1); }
constexpr std::size_t forward_smem(int D) {
  return sizeof(float) * (3 * tile_floats(D) + square_floats());
}
constexpr std::size_t dkdv_smem(int D) {
  return sizeof(float) * (4 * tile_floats(D) + 2 * square_floats() + 2 * kTile);
}
constexpr std::size_t dq_smem(int D) {
  return sizeof(float) * (4 * tile_floats(D) + square_floats() + 2 * kTile);
}
constexpr std::size_t kStaticSmemLimit = 48 * 1024;

// The next `rows` rows of W floats of the block's dynamic shared memory.
template <int W>
__device__ __forceinline__ auto carve(float*& p, int rows) -> float (*)[W] {
  float(*r)[W] = reinterpret_cast<float(*)[W]>(p);
  p += rows * W;
  return r;
}

struct FlashDims {
  int T, H;
  std::int64_t C;  // H * D
  float scale;     // 1 / sqrt(D)
};

// rows [row0, row0 + kTile) of the D columns starting at `col` of a row-major x with row
// stride ld (rows >= T read as 0) -> dst [kTile][D + 1] (the +1 pad spreads rows over banks).
template <class T, int D>
__device__ void load_tile(const T* x, std::int64_t ld, std::int64_t col, int row0, int Tn,
                          float (*dst)[D + 1]) {
  for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
    const int r = e / D, d = e % D;
    dst[r][d] =
        row0 + r < Tn ? to_float(x[static_cast<std::int64_t>(row0 + r) * ld + col + d]) : 0.f;
  }
}

// The inverse, for rows < T, rounding each value once.
template <class T, int D>
__device__ void store_tile(T* x, std::int64_t ld, std::int64_t col, int row0, int Tn,
                           const float (*src)[D + 1]) {
  for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
    const int r = e / D, d = e % D;
    if (row0 + r < Tn)
      x[static_cast<std::int64_t>(row0 + r) * ld + col + d] = from_float<T>(src[r][d]);
  }
}

// The thread's 8 dot products a[ra] . b[q4 + 4 jj] (jj = 0..7): each a[ra][d] is loaded once
// and used 8 times, halving the shared-memory loads per multiply-add of a plain row-by-row dot
// (the kernels are bound by those loads). Each sum runs over d in increasing order.
template <int D>
__device__ __forceinline__ void dots_one_row(const float (*a)[D + 1], int ra,
                                             const float (*b)[D + 1], int q4,
                                             float (&out)[kTile / 4]) {
#pragma unroll
  for (int jj = 0; jj < kTile / 4; ++jj) out[jj] = 0.f;
  for (int d = 0; d < D; ++d) {
    const float x = a[ra][d];
#pragma unroll
    for (int jj = 0; jj < kTile / 4; ++jj) out[jj] += x * b[q4 + 4 * jj][d];
  }
}

// The 8 dot products a[q4 + 4 jj] . b[rb], b's row loaded once per d.
template <int D>
__device__ __forceinline__ void dots_one_col(const float (*a)[D + 1], int q4,
                                             const float (*b)[D + 1], int rb,
                                             float (&out)[kTile / 4]) {
#pragma unroll
  for (int jj = 0; jj < kTile / 4; ++jj) out[jj] = 0.f;
  for (int d = 0; d < D; ++d) {
    const float y = b[rb][d];
#pragma unroll
    for (int jj = 0; jj < kTile / 4; ++jj) out[jj] += a[q4 + 4 * jj][d] * y;
  }
}

// max / sum over the 4 consecutive lanes that share a tile row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Forward. Block (query tile, b * H + h). Thread t: row r = t / 4 of the tile; key columns
// q4 + 4 jj of each key tile; output dims q4 + 4 kk.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const T* qkv, T* out, float* lse,
                                                                  FlashDims f) {
  extern __shared__ float4 flash_smem[];
  float* sp = reinterpret_cast<float*>(flash_smem);
  float(*qs)[D + 1] = carve<D + 1>(sp, kTile);
  float(*ks)[D + 1] = carve<D + 1>(sp, kTile);
  float(*vs)[D + 1] = carve<D + 1>(sp, kTile);
  float(*ps)[kTile + 1] = carve<kTile + 1>(sp, kTile);
  const int tile = blockIdx.x, b = blockIdx.y / f.H, h = blockIdx.y % f.H;
  const std::int64_t ld = 3 * f.C;
  const T* base = qkv + static_cast<std::int64_t>(b) * f.T * ld;
  const int i0 = tile * kTile, r = threadIdx.x / 4, q4 = threadIdx.x % 4, qi = i0 + r;
  load_tile<T, D>(base, ld, h * D, i0, f.T, qs);
  float o[D / 4];
#pragma unroll
  for (int kk = 0; kk < D / 4; ++kk) o[kk] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int jt = 0; jt <= tile; ++jt) {  // key tiles up to the diagonal (kTile rows each way)
    const int j0 = jt * kTile;
    __syncthreads();  // the previous tile's ks, vs, ps are no longer read
    load_tile<T, D>(base, ld, f.C + h * D, j0, f.T, ks);
    load_tile<T, D>(base, ld, 2 * f.C + h * D, j0, f.T, vs);
    __syncthreads();
    float s[kTile / 4];
    dots_one_row<D>(qs, r, ks, q4, s);  // masked keys too: their (finite) values are dropped
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kTile / 4; ++jj) {
      const int kj = j0 + q4 + 4 * jj;
      s[jj] = kj <= qi && kj < f.T ? s[jj] * f.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    // Key 0 is in the first tile of every row, so m_new is finite from the first tile on.
    const float m_new = fmaxf(m, quad_max(tile_max));
    const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
    float psum = 0.f;
#pragma unroll
    for (int jj = 0; jj < kTile / 4; ++jj) {
      const float p = expf(s[jj] - m_new);  // masked: exp(-inf) = 0
      ps[r][q4 + 4 * jj] = p;
      psum += p;
    }
    l = l * alpha + quad_sum(psum);
    m = m_new;
    __syncthreads();  // the row's P is complete
#pragma unroll
    for (int kk = 0; kk < D / 4; ++kk) o[kk] *= alpha;
    for (int c = 0; c < kTile; ++c) {  // each p loaded once for the thread's 16 dims
      const float p = ps[r][c];
#pragma unroll
      for (int kk = 0; kk < D / 4; ++kk) o[kk] += p * vs[c][q4 + 4 * kk];
    }
  }
  const float inv_l = 1.0f / l;
  __syncthreads();  // qs is reused to stage the output for coalesced stores
#pragma unroll
  for (int kk = 0; kk < D / 4; ++kk) qs[r][q4 + 4 * kk] = o[kk] * inv_l;
  if (q4 == 0 && qi < f.T) lse[static_cast<std::int64_t>(blockIdx.y) * f.T + qi] = m + logf(l);
  __syncthreads();
  store_tile<T, D>(out + static_cast<std::int64_t>(b) * f.T * f.C, f.C, h * D, i0, f.T, qs);
}

// dsum [B, H, T] = sum_d dout * out per row: the D_i = rowsum(dO o O) of the softmax backward.
template <class T, int D>
__global__ void flash_dsum_kernel(const T* dout, const T* out, float* dsum, std::int64_t rows,
                                  FlashDims f) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const std::int64_t bt = row / f.H, h = row % f.H, b = bt / f.T, t = bt % f.T;
  float s = 0.f;
  for (int d = lane; d < D; d += 32) {
    const std::int64_t i = bt * f.C + h * D + d;
    s += to_float(dout[i]) * to_float(out[i]);
  }
  s = detail::warp_sum(s);
  if (lane == 0) dsum[(b * f.H + h) * f.T + t] = s;
}

// Loads lse and dsum of query rows [i0, i0 + kTile) of head bh (0 beyond T).
__device__ void load_row_stats(const float* lse, const float* dsum, std::int64_t bh, int i0,
                               int Tn, float* lse_s, float* dsum_s) {
  if (threadIdx.x < kTile) {
    const int qi = i0 + threadIdx.x;
    lse_s[threadIdx.x] = qi < Tn ? lse[bh * Tn + qi] : 0.f;
    dsum_s[threadIdx.x] = qi < Tn ? dsum[bh * Tn + qi] : 0.f;
  }
}

// dK, dV of one key tile. Thread t: key row c = t / 4, query rows q4 + 4 jj of each query tile,
// gradient dims q4 + 4 kk. dv_c = sum_i p_ic dO_i; dk_c = scale sum_i ds_ic q_i.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_dkdv_kernel(const T* qkv, const T* dout,
                                                               const float* lse, const float* dsum,
                                                               T* dqkv, FlashDims f) {
  extern __shared__ float4 flash_smem[];
  float* sp = reinterpret_cast<float*>(flash_smem);
  float(*ks)[D + 1] = carve<D + 1>(sp, kTile);
  float(*vs)[D + 1] = carve<D + 1>(sp, kTile);
  float(*qs)[D + 1] = carve<D + 1>(sp, kTile);
  float(*dos)[D + 1] = carve<D + 1>(sp, kTile);
  float(*ps)[kTile + 1] = carve<kTile + 1>(sp, kTile);
  float(*dss)[kTile + 1] = carve<kTile + 1>(sp, kTile);
  float* lse_s = sp;
  float* dsum_s = sp + kTile;
  const int jt = blockIdx.x, b = blockIdx.y / f.H, h = blockIdx.y % f.H;
  const std::int64_t ld = 3 * f.C;
  const T* base = qkv + static_cast<std::int64_t>(b) * f.T * ld;
  const T* dbase = dout + static_cast<std::int64_t>(b) * f.T * f.C;
  const int j0 = jt * kTile, c = threadIdx.x / 4, q4 = threadIdx.x % 4, kj = j0 + c;
  load_tile<T, D>(base, ld, f.C + h * D, j0, f.T, ks);
  load_tile<T, D>(base, ld, 2 * f.C + h * D, j0, f.T, vs);
  float dk[D / 4], dv[D / 4];
#pragma unroll
  for (int kk = 0; kk < D / 4; ++kk) dk[kk] = dv[kk] = 0.f;
  const int tiles = (f.T + kTile - 1) / kTile;
  for (int it = jt; it < tiles; ++it) {  // query tiles at or below the diagonal
    const int i0 = it * kTile;
    __syncthreads();
    load_tile<T, D>(base, ld, h * D, i0, f.T, qs);
    load_tile<T, D>(dbase, f.C, h * D, i0, f.T, dos);
    load_row_stats(lse, dsum, blockIdx.y, i0, f.T, lse_s, dsum_s);
    __syncthreads();
    float qk[kTile / 4], dov[kTile / 4];
    dots_one_col<D>(qs, q4, ks, c, qk);
    dots_one_col<D>(dos, q4, vs, c, dov);
#pragma unroll
    for (int jj = 0; jj < kTile / 4; ++jj) {
      const int r = q4 + 4 * jj, qi = i0 + r;
      const bool live = kj <= qi && qi < f.T && kj < f.T;
      const float p = live ? expf(qk[jj] * f.scale - lse_s[r]) : 0.f;
      ps[r][c] = p;
      dss[r][c] = p * (dov[jj] - dsum_s[r]);
    }
    __syncthreads();
    for (int r = 0; r < kTile; ++r) {
      const float p = ps[r][c], g = dss[r][c];
#pragma unroll
      for (int kk = 0; kk < D / 4; ++kk) {
        dv[kk] += p * dos[r][q4 + 4 * kk];
        dk[kk] += g * qs[r][q4 + 4 * kk];
      }
    }
  }
  __syncthreads();  // stage through ks / vs for coalesced stores
#pragma unroll
  for (int kk = 0; kk < D / 4; ++kk) {
    ks[c][q4 + 4 * kk] = dk[kk] * f.scale;
    vs[c][q4 + 4 * kk] = dv[kk];
  }
  __syncthreads();
  T* gbase = dqkv + static_cast<std::int64_t>(b) * f.T * ld;
  store_tile<T, D>(gbase, ld, f.C + h * D, j0, f.T, ks);
  store_tile<T, D>(gbase, ld, 2 * f.C + h * D, j0, f.T, vs);
}

// dQ of one query tile: dq_i = scale sum_j ds_ij k_j. Thread t: row r = t / 4.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(const T* qkv, const T* dout,
                                                             const float* lse, const float* dsum,
                                                             T* dqkv, FlashDims f) {
  extern __shared__ float4 flash_smem[];
  float* sp = reinterpret_cast<float*>(flash_smem);
  float(*qs)[D + 1] = carve<D + 1>(sp, kTile);
  float(*dos)[D + 1] = carve<D + 1>(sp, kTile);
  float(*ks)[D + 1] = carve<D + 1>(sp, kTile);
  float(*vs)[D + 1] = carve<D + 1>(sp, kTile);
  float(*dss)[kTile + 1] = carve<kTile + 1>(sp, kTile);
  float* lse_s = sp;
  float* dsum_s = sp + kTile;
  const int it = blockIdx.x, b = blockIdx.y / f.H, h = blockIdx.y % f.H;
  const std::int64_t ld = 3 * f.C;
  const T* base = qkv + static_cast<std::int64_t>(b) * f.T * ld;
  const int i0 = it * kTile, r = threadIdx.x / 4, q4 = threadIdx.x % 4, qi = i0 + r;
  load_tile<T, D>(base, ld, h * D, i0, f.T, qs);
  load_tile<T, D>(dout + static_cast<std::int64_t>(b) * f.T * f.C, f.C, h * D, i0, f.T, dos);
  load_row_stats(lse, dsum, blockIdx.y, i0, f.T, lse_s, dsum_s);
  float dq[D / 4];
#pragma unroll
  for (int kk = 0; kk < D / 4; ++kk) dq[kk] = 0.f;
  for (int jt = 0; jt <= it; ++jt) {
    const int j0 = jt * kTile;
    __syncthreads();
    load_tile<T, D>(base, ld, f.C + h * D, j0, f.T, ks);
    load_tile<T, D>(base, ld, 2 * f.C + h * D, j0, f.T, vs);
    __syncthreads();
    float qk[kTile / 4], dov[kTile / 4];
    dots_one_row<D>(qs, r, ks, q4, qk);
    dots_one_row<D>(dos, r, vs, q4, dov);
#pragma unroll
    for (int jj = 0; jj < kTile / 4; ++jj) {
      const int c = q4 + 4 * jj, kj = j0 + c;
      const bool live = kj <= qi && qi < f.T;
      const float p = live ? expf(qk[jj] * f.scale - lse_s[r]) : 0.f;
      dss[r][c] = p * (dov[jj] - dsum_s[r]);
    }
    __syncthreads();
    for (int c = 0; c < kTile; ++c) {
      const float g = dss[r][c];
#pragma unroll
      for (int kk = 0; kk < D / 4; ++kk) dq[kk] += g * ks[c][q4 + 4 * kk];
    }
  }
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < D / 4; ++kk) qs[r][q4 + 4 * kk] = dq[kk] * f.scale;
  __syncthreads();
  store_tile<T, D>(dqkv + static_cast<std::int64_t>(b) * f.T * ld, ld, h * D, i0, f.T, qs);
}

FlashDims check_flash(const DeviceTensor& qkv, std::int64_t n_head, const char* op) {
  if (qkv.ndim() != 3 || qkv.dim(2) % 3 != 0 || n_head <= 0 || (qkv.dim(2) / 3) % n_head != 0) {
    throw std::invalid_argument(std::string(op) + ": qkv " + shape_str(qkv.shape()) +
                                " is not [B, T, 3C] with C a multiple of n_head");
  }
  const std::int64_t C = qkv.dim(2) / 3, D = C / n_head;
  if (!flash_attention_supported(D)) {
    throw std::invalid_argument(std::string(op) + ": head size " + std::to_string(D) +
                                " (the fused kernels are built for 64 and 128)");
  }
  if (qkv.dim(1) > (1 << 30) || qkv.dim(0) * n_head > 65535) {
    throw std::invalid_argument(std::string(op) + ": B * H must be <= 65535 and T < 2^30");
  }
  return {static_cast<int>(qkv.dim(1)), static_cast<int>(n_head), C,
          1.0f / std::sqrt(static_cast<float>(D))};
}

void check_like(const DeviceTensor& t, const Shape& shape, DType dt, const char* op,
                const char* name) {
  if (t.shape() != shape || t.dtype() != dt) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' is " + shape_str(t.shape()) +
                                ", expected " + shape_str(shape) + " " +
                                std::string(dtype_name(dt)));
  }
}

}  // namespace

bool flash_attention_supported(std::int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

FlashSmem flash_attention_smem(std::int64_t head_dim) {
  if (!flash_attention_supported(head_dim)) {
    throw std::invalid_argument("flash_attention_smem: head size " + std::to_string(head_dim));
  }
  const int D = static_cast<int>(head_dim);
  return {forward_smem(D), dkdv_smem(D), dq_smem(D)};
}

namespace {

// f(std::integral_constant<int, D>) for the head size D of f's dims (64 or 128: check_flash).
template <class F>
void dispatch_head_dim(const FlashDims& f, F&& fn) {
  if (f.C / f.H == 128) {
    fn(std::integral_constant<int, 128>{});
  } else {
    fn(std::integral_constant<int, 64>{});
  }
}

// Lets `kernel` take `bytes` of dynamic shared memory: above the 48 KiB default it must opt in,
// and the device must offer that much (an InputError-like refusal here beats a launch error).
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes, const char* op) {
  if (bytes <= kStaticSmemLimit) return;
  int device = 0, optin = 0;
  MIXPAR_CUDA_CHECK(cudaGetDevice(&device));
  MIXPAR_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<std::size_t>(optin)) {
    throw std::invalid_argument(std::string(op) + ": needs " + std::to_string(bytes) +
                                " bytes of shared memory per block; the device offers " +
                                std::to_string(optin));
  }
  MIXPAR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
}

}  // namespace

void flash_attention_forward(const DeviceTensor& qkv, std::int64_t n_head, DeviceTensor& out,
                             DeviceTensor& lse, cudaStream_t stream) {
  const char* op = "cuda::flash_attention_forward";
  const FlashDims f = check_flash(qkv, n_head, op);
  const std::int64_t B = qkv.dim(0);
  check_like(out, {B, f.T, f.C}, qkv.dtype(), op, "out");
  check_like(lse, {B, f.H, f.T}, DType::kF32, op, "lse");
  if (B == 0 || f.T == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(f.T, kTile)), static_cast<unsigned>(B * f.H));
  detail::dispatch_working_type(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_head_dim(f, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      const std::size_t smem = forward_smem(D);
      allow_smem(flash_forward_kernel<T, D>, smem, op);
      flash_forward_kernel<T, D><<<grid, kThreads, smem, stream>>>(
          static_cast<const T*>(qkv.data()), static_cast<T*>(out.data()), lse.f32(), f);
      MIXPAR_CUDA_CHECK_LAUNCH();
    });
  });
}

void flash_attention_backward(const DeviceTensor& dout, const DeviceTensor& qkv,
                              const DeviceTensor& out, const DeviceTensor& lse,
                              std::int64_t n_head, DeviceTensor& dqkv, cudaStream_t stream) {
  const char* op = "cuda::flash_attention_backward";
  const FlashDims f = check_flash(qkv, n_head, op);
  const std::int64_t B = qkv.dim(0);
  check_like(dout, {B, f.T, f.C}, qkv.dtype(), op, "dout");
  check_like(out, {B, f.T, f.C}, qkv.dtype(), op, "out");
  check_like(lse, {B, f.H, f.T}, DType::kF32, op, "lse");
  check_like(dqkv, qkv.shape(), qkv.dtype(), op, "dqkv");
  if (B == 0 || f.T == 0) return;
  DeviceTensor dsum = DeviceTensor::empty({B, f.H, f.T}, DType::kF32);
  const dim3 grid(static_cast<unsigned>(ceil_div(f.T, kTile)), static_cast<unsigned>(B * f.H));
  const std::int64_t rows = B * f.T * f.H;
  detail::dispatch_working_type(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pq = static_cast<const T*>(qkv.data());
    const T* pg = static_cast<const T*>(dout.data());
    T* pd = static_cast<T*>(dqkv.data());
    const LaunchConfig cfg = launch_rows(rows, 8);
    dispatch_head_dim(f, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      flash_dsum_kernel<T, D><<<cfg.grid, cfg.block, 0, stream>>>(
          pg, static_cast<const T*>(out.data()), dsum.f32(), rows, f);
      MIXPAR_CUDA_CHECK_LAUNCH();
      allow_smem(flash_dkdv_kernel<T, D>, dkdv_smem(D), op);
      flash_dkdv_kernel<T, D><<<grid, kThreads, dkdv_smem(D), stream>>>(pq, pg, lse.f32(),
                                                                        dsum.f32(), pd, f);
      MIXPAR_CUDA_CHECK_LAUNCH();
      allow_smem(flash_dq_kernel<T, D>, dq_smem(D), op);
      flash_dq_kernel<T, D><<<grid, kThreads, dq_smem(D), stream>>>(pq, pg, lse.f32(),
                                                                    dsum.f32(), pd, f);
      MIXPAR_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace mixpar::cuda
