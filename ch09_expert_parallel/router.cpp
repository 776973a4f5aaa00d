#include "ch09_expert_parallel/router.h"

#include <cmath>
#include <stdexcept>

#include "ops/matmul.h"

namespace mixpar::ch09 {

RouterOut router_forward(const Tensor& x, const Tensor& w) {
  if (w.dtype() != DType::kF32) throw std::invalid_argument("router_forward: w must be FP32");
  RouterOut r;
  r.x = x.dtype() == DType::kF32 ? x : x.to(DType::kF32);
  r.logits = Tensor::empty({x.dim(0), w.dim(1)}, DType::kF32, MemCategory::kActivations);
  ops::matmul(r.x, w, r.logits);  // FP32 operands: the FMA kernels (common/ops/fma_gemm.h)
  r.probs = Tensor::empty(r.logits.shape(), DType::kF32, MemCategory::kActivations);
  softmax_rows(r.logits, r.probs);
  return r;
}

void softmax_rows(const Tensor& logits, Tensor& probs) {
  const std::int64_t T = logits.dim(0), E = logits.dim(1);
  const float* l = logits.data_as<float>();
  float* p = probs.data_as<float>();
  for (std::int64_t t = 0; t < T; ++t) {
    float m = l[t * E];
    for (std::int64_t e = 1; e < E; ++e) m = std::fmax(m, l[t * E + e]);
    float sum = 0;
    for (std::int64_t e = 0; e < E; ++e) sum += (p[t * E + e] = std::exp(l[t * E + e] - m));
    for (std::int64_t e = 0; e < E; ++e) p[t * E + e] /= sum;
  }
}

void softmax_backward(const Tensor& probs, const Tensor& dprobs, Tensor& dlogits) {
  const std::int64_t T = probs.dim(0), E = probs.dim(1);
  const float *p = probs.data_as<float>(), *dp = dprobs.data_as<float>();
  float* dl = dlogits.data_as<float>();
  for (std::int64_t t = 0; t < T; ++t) {
    float dot = 0;
    for (std::int64_t e = 0; e < E; ++e) dot += p[t * E + e] * dp[t * E + e];
    for (std::int64_t e = 0; e < E; ++e) dl[t * E + e] = p[t * E + e] * (dp[t * E + e] - dot);
  }
}

void router_backward(const RouterOut& r, const Tensor& w, const Tensor& dlogits, Tensor& dw,
                     Tensor& dx, bool accumulate) {
  ops::matmul(r.x, dlogits, dw, true, false, ops::Accumulation::kFP32, 1.0f,
              accumulate ? 1.0f : 0.0f);
  ops::matmul(dlogits, w, dx, false, true);
}

}  // namespace mixpar::ch09
