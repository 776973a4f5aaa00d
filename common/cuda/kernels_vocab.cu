// The vocabulary-sized kernels: token + position embedding (layers::embedding_forward /
// _backward) and cross-entropy fused with softmax (layers::crossentropy_stats, _loss and
// _backward). The loss never materialises B x T x V in FP32: one block per row reads the
// logits in the working dtype, keeps [N] statistics, and writes dlogits over the logits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_math.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"

namespace mixpar::cuda {

using detail::from_float;
using detail::to_float;

namespace {

constexpr int kRowThreads = 256;  // threads per row of the cross-entropy kernels

// ---- embedding forward: out [B*T, C] = wte[token] + wpe[t], t = row % T, summed in FP32.
// Token ids are checked on the host, but the kernels do not trust them: an id outside wte's
// `rows` would read (or, backward, write) outside the table, an illegal address that poisons
// the CUDA context for the rest of the process. Such a row becomes NaN instead: the loss is
// NaN, loud, and the context survives.
template <class T>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const T* wte, const T* wpe,
                                         T* out, std::int64_t n, std::int64_t T_, std::int64_t C,
                                         std::int64_t rows) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t row = i / C, c = i % C;
    const std::int64_t id = tokens[row];
    if (id < 0 || id >= rows) {
      out[i] = from_float<T>(NAN);
      continue;
    }
    out[i] = from_float<T>(to_float(wte[id * C + c]) + to_float(wpe[(row % T_) * C + c]));
  }
}

// ---- dwte: block (u, channel block): the rows of distinct token u added in order to its row.
template <class T>
__global__ void embedding_dwte_kernel(const std::int32_t* token, const std::int32_t* offset,
                                      const std::int32_t* position, const T* dout, T* dwte,
                                      std::int64_t C, std::int64_t rows) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const std::int64_t u = blockIdx.x;
  const std::int64_t id = token[u];
  if (id < 0 || id >= rows) return;  // no row to add into (the forward made it NaN)
  float acc = to_float(dwte[id * C + c]);
  for (std::int32_t p = offset[u]; p < offset[u + 1]; ++p) {
    acc += to_float(dout[static_cast<std::int64_t>(position[p]) * C + c]);
  }
  dwte[id * C + c] = from_float<T>(acc);
}

// ---- dwpe [T, C] (+)= sum over b of dout [B, T, C], b in order.
template <class T>
__global__ void embedding_dwpe_kernel(const T* dout, T* dwpe, std::int64_t B, std::int64_t T_,
                                      std::int64_t C, bool accumulate) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T_ * C) return;
  float acc = accumulate ? to_float(dwpe[i]) : 0.f;
  for (std::int64_t b = 0; b < B; ++b) acc += to_float(dout[b * T_ * C + i]);
  dwpe[i] = from_float<T>(acc);
}

// Block-wide reductions in a fixed order (warps by butterfly, then warp 0 over the warps).
__device__ float block_max(float v, float* smem) {
  v = detail::warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read from a previous reduction
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  float r = lane < warps ? smem[lane] : -INFINITY;
  return detail::warp_max(r);
}
__device__ float block_sum(float v, float* smem) {
  v = detail::warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  float r = lane < warps ? smem[lane] : 0.f;
  return detail::warp_sum(r);
}

// ---- cross-entropy statistics: block per row; max, then sum exp(l - max) (two passes like the
// CPU, the second from L2), lse = max + log(sum), target_logit = l[target].
template <class T>
__global__ void crossentropy_forward_kernel(const T* logits, const std::int32_t* targets,
                                            float* lse, float* target_logit, std::int64_t V,
                                            std::int64_t ld) {
  __shared__ float smem[32];
  const T* row = logits + static_cast<std::int64_t>(blockIdx.x) * ld;
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, to_float(row[j]));
  mx = block_max(mx, smem);
  float se = 0.f;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) se += expf(to_float(row[j]) - mx);
  se = block_sum(se, smem);
  if (threadIdx.x == 0) {
    const std::int64_t target = targets[blockIdx.x];
    lse[blockIdx.x] = mx + logf(se);
    // A target outside [0, V) has no logit: NaN, not a read past the row.
    target_logit[blockIdx.x] = target >= 0 && target < V ? to_float(row[target]) : NAN;
  }
}

// ---- loss = mean(lse - target_logit), one block, FP64, fixed order.
__global__ void crossentropy_mean_kernel(const float* lse, const float* target_logit, double* loss,
                                         std::int64_t N) {
  __shared__ double smem[32];
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    s += static_cast<double>(lse[i]) - static_cast<double>(target_logit[i]);
  }
  s = detail::warp_sum(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = s;
  __syncthreads();
  if (warp == 0) {
    double r = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : 0.0;
    r = detail::warp_sum(r);
    if (lane == 0) loss[0] = r / static_cast<double>(N);
  }
}

// ---- dlogits = scale (exp(l - lse) - onehot(target)) for j < V, 0 in the padding; in place ok.
template <class T>
__global__ void crossentropy_backward_kernel(const T* logits, const std::int32_t* targets,
                                             const float* lse, float scale, T* dlogits,
                                             std::int64_t V, std::int64_t ld) {
  const std::int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  T* drow = dlogits + r * ld;
  const std::int64_t target = targets[r];
  // A target outside [0, V): the row's gradient is NaN (the loss already is).
  const float l = target >= 0 && target < V ? lse[r] : NAN;
  for (std::int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
    float d = 0.f;
    if (j < V) {
      d = expf(to_float(row[j]) - l) * scale;
      if (j == target) d -= scale;
    }
    drow[j] = from_float<T>(d);
  }
}

struct LogitDims {
  std::int64_t N, ld;
};
LogitDims check_logits(const DeviceTensor& logits, std::int64_t V, const DeviceIds& targets,
                       const char* op) {
  if (logits.ndim() != 2 || V <= 0 || logits.dim(1) < V) {
    throw std::invalid_argument(std::string(op) + ": logits " + shape_str(logits.shape()) +
                                " must be [N, Vp] with Vp >= V = " + std::to_string(V));
  }
  if (targets.size() != logits.dim(0)) {
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(targets.size()) +
                                " targets for " + std::to_string(logits.dim(0)) + " rows");
  }
  if (logits.dim(0) > kMaxGridX) throw std::invalid_argument(std::string(op) + ": too many rows");
  return {logits.dim(0), logits.dim(1)};
}

void check_f32(const DeviceTensor& t, std::int64_t n, const char* op, const char* name) {
  if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != n) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' must be f32 [" +
                                std::to_string(n) + "]");
  }
}

}  // namespace

void embedding_forward(const DeviceIds& tokens, const DeviceTensor& wte, const DeviceTensor& wpe,
                       DeviceTensor& out, cudaStream_t stream) {
  const char* op = "cuda::embedding_forward";
  if (out.ndim() != 3 || wte.ndim() != 2 || wpe.ndim() != 2 || wte.dim(1) != out.dim(2) ||
      wpe.dim(1) != out.dim(2) || wpe.dim(0) < out.dim(1) || wte.dtype() != out.dtype() ||
      wpe.dtype() != out.dtype() || tokens.size() != out.dim(0) * out.dim(1)) {
    throw std::invalid_argument(std::string(op) + ": out " + shape_str(out.shape()) + ", wte " +
                                shape_str(wte.shape()) + ", wpe " + shape_str(wpe.shape()) +
                                ", " + std::to_string(tokens.size()) + " tokens do not fit");
  }
  const LaunchConfig cfg = launch_1d(out.numel());
  if (cfg.grid == 0) return;
  detail::dispatch_working_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
        tokens.data(), static_cast<const T*>(wte.data()), static_cast<const T*>(wpe.data()),
        static_cast<T*>(out.data()), out.numel(), out.dim(1), out.dim(2), wte.dim(0));
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

EmbeddingBuckets make_embedding_buckets(std::span<const std::int32_t> tokens,
                                        cudaStream_t stream) {
  // Row indices sorted by token, stable: positions stay increasing within a token's group,
  // the order in which the CPU's embedding_backward adds them.
  std::vector<std::int32_t> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return tokens[static_cast<std::size_t>(a)] < tokens[static_cast<std::size_t>(b)];
  });
  std::vector<std::int32_t> distinct, offset;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::int32_t id = tokens[static_cast<std::size_t>(order[i])];
    if (distinct.empty() || distinct.back() != id) {
      distinct.push_back(id);
      offset.push_back(static_cast<std::int32_t>(i));
    }
  }
  offset.push_back(static_cast<std::int32_t>(order.size()));
  EmbeddingBuckets b;
  b.token = DeviceIds::upload(distinct, stream);
  b.offset = DeviceIds::upload(offset, stream);
  b.position = DeviceIds::upload(order, stream);
  b.distinct = static_cast<std::int64_t>(distinct.size());
  return b;
}

void embedding_backward(const EmbeddingBuckets& buckets, const DeviceTensor& dout,
                        DeviceTensor& dwte, DeviceTensor* dwpe, bool accumulate,
                        cudaStream_t stream) {
  const char* op = "cuda::embedding_backward";
  if (dout.ndim() != 3 || dwte.ndim() != 2 || dwte.dim(1) != dout.dim(2) ||
      dwte.dtype() != dout.dtype() ||
      (dwpe && (dwpe->ndim() != 2 || dwpe->dim(1) != dout.dim(2) || dwpe->dim(0) < dout.dim(1) ||
                dwpe->dtype() != dout.dtype())) ||
      buckets.position.size() != dout.dim(0) * dout.dim(1)) {
    throw std::invalid_argument(std::string(op) + ": dout " + shape_str(dout.shape()) + ", dwte " +
                                shape_str(dwte.shape()) + " and the buckets do not fit");
  }
  const std::int64_t B = dout.dim(0), T_ = dout.dim(1), C = dout.dim(2);
  if (!accumulate) dwte.zero(stream);
  detail::dispatch_working_type(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (buckets.distinct > 0 && C > 0) {
      const dim3 grid(static_cast<unsigned>(buckets.distinct),
                      static_cast<unsigned>(ceil_div(C, 128)));
      embedding_dwte_kernel<T><<<grid, 128, 0, stream>>>(
          buckets.token.data(), buckets.offset.data(), buckets.position.data(),
          static_cast<const T*>(dout.data()), static_cast<T*>(dwte.data()), C, dwte.dim(0));
      MIXPAR_CUDA_CHECK_LAUNCH();
    }
    if (dwpe == nullptr) return;
    // Rows t >= T of dwpe: untouched when accumulating, zero otherwise (as on the CPU).
    if (!accumulate) dwpe->zero(stream);
    const LaunchConfig cfg = launch_1d(T_ * C, 256, 1, kMaxGridX);
    if (cfg.grid == 0) return;
    embedding_dwpe_kernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
        static_cast<const T*>(dout.data()), static_cast<T*>(dwpe->data()), B, T_, C, accumulate);
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

void crossentropy_forward(const DeviceTensor& logits, std::int64_t V, const DeviceIds& targets,
                          DeviceTensor& lse, DeviceTensor& target_logit, cudaStream_t stream) {
  const char* op = "cuda::crossentropy_forward";
  const LogitDims d = check_logits(logits, V, targets, op);
  check_f32(lse, d.N, op, "lse");
  check_f32(target_logit, d.N, op, "target_logit");
  if (d.N == 0) return;
  detail::dispatch_working_type(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    crossentropy_forward_kernel<T><<<static_cast<unsigned>(d.N), kRowThreads, 0, stream>>>(
        static_cast<const T*>(logits.data()), targets.data(), lse.f32(), target_logit.f32(), V,
        d.ld);
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

void crossentropy_mean(const DeviceTensor& lse, const DeviceTensor& target_logit,
                       DeviceTensor& loss, cudaStream_t stream) {
  const char* op = "cuda::crossentropy_mean";
  check_f32(target_logit, lse.numel(), op, "target_logit");
  if (!loss.defined() || loss.dtype() != DType::kF64 || loss.numel() != 1) {
    throw std::invalid_argument(std::string(op) + ": 'loss' must be f64 [1]");
  }
  if (lse.numel() == 0) {
    // The kernel would divide by N = 0; the mean over no rows is undefined, not 0.
    throw std::invalid_argument(std::string(op) + ": the mean cross-entropy of an empty batch");
  }
  crossentropy_mean_kernel<<<1, 1024, 0, stream>>>(lse.f32(), target_logit.f32(), loss.f64(),
                                                   lse.numel());
  MIXPAR_CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(const DeviceTensor& logits, std::int64_t V, const DeviceIds& targets,
                           const DeviceTensor& lse, float grad_scale, DeviceTensor& dlogits,
                           cudaStream_t stream) {
  const char* op = "cuda::crossentropy_backward";
  const LogitDims d = check_logits(logits, V, targets, op);
  check_f32(lse, d.N, op, "lse");
  if (dlogits.shape() != logits.shape() || dlogits.dtype() != logits.dtype()) {
    throw std::invalid_argument(std::string(op) + ": dlogits must match the logits");
  }
  if (d.N == 0) return;
  // d(mean)/d(row) times the loss scale, formed in FP32 like the CPU's, before any rounding.
  const float scale = grad_scale / static_cast<float>(d.N);
  detail::dispatch_working_type(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    crossentropy_backward_kernel<T><<<static_cast<unsigned>(d.N), kRowThreads, 0, stream>>>(
        static_cast<const T*>(logits.data()), targets.data(), lse.f32(), scale,
        static_cast<T*>(dlogits.data()), V, d.ld);
    MIXPAR_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mixpar::cuda
