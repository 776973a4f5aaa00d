#include "ch09_expert_parallel/experts.h"

#include <cmath>

#include "ch09_expert_parallel/grouped_gemm.h"
#include "model/layers.h"
#include "random/philox.h"

namespace mixpar::ch09 {

ExpertWeights init_experts(const MoeConfig& c, int first, int count, float bias_std) {
  const std::int64_t C = c.d_model, H = c.d_hidden, El = count;
  ExpertWeights w;
  w.first = first;
  w.fc_w = Tensor::empty({El, C, H}, DType::kF32, MemCategory::kParameters);
  w.fc_b = Tensor::empty({El, H}, DType::kF32, MemCategory::kParameters);
  w.proj_w = Tensor::empty({El, H, C}, DType::kF32, MemCategory::kParameters);
  w.proj_b = Tensor::empty({El, C}, DType::kF32, MemCategory::kParameters);
  for (std::int64_t e = 0; e < El; ++e) {
    Philox g(c.seed, 1000 + static_cast<std::uint64_t>(first + e));
    Tensor fw = w.fc_w.flat_slice(e * C * H, C * H), fb = w.fc_b.flat_slice(e * H, H);
    Tensor pw = w.proj_w.flat_slice(e * H * C, H * C), pb = w.proj_b.flat_slice(e * C, C);
    fill_normal(fw, g, 0.0f, static_cast<float>(1.0 / std::sqrt(double(C))));
    fill_normal(pw, g, 0.0f, static_cast<float>(1.0 / std::sqrt(double(H))));
    fill_normal(fb, g, 0.0f, bias_std);
    fill_normal(pb, g, 0.0f, bias_std);
  }
  return w;
}

ExpertWeights zeros_like(const ExpertWeights& w, MemCategory category) {
  ExpertWeights g;
  g.first = w.first;
  g.fc_w = Tensor::zeros(w.fc_w.shape(), DType::kF32, category);
  g.fc_b = Tensor::zeros(w.fc_b.shape(), DType::kF32, category);
  g.proj_w = Tensor::zeros(w.proj_w.shape(), DType::kF32, category);
  g.proj_b = Tensor::zeros(w.proj_b.shape(), DType::kF32, category);
  return g;
}

namespace {

// The working copy of a 16-bit run: the masters rounded to dtype (overflow to inf, as the
// ops round: a saturating cast would hide it from the loss scaler).
ExpertWeights working_copy(const ExpertWeights& w, DType dtype) {
  if (dtype == DType::kF32) return w;
  ExpertWeights c;
  c.first = w.first;
  c.fc_w = w.fc_w.to(dtype, Saturation::kNoSat);
  c.fc_b = w.fc_b.to(dtype, Saturation::kNoSat);
  c.proj_w = w.proj_w.to(dtype, Saturation::kNoSat);
  c.proj_b = w.proj_b.to(dtype, Saturation::kNoSat);
  return c;
}

Tensor in_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : t.to(dtype, Saturation::kNoSat);
}

}  // namespace

void experts_forward(const ExpertWeights& w, const Tensor& x, std::span<const std::int64_t> offsets,
                     ExpertActs& acts, Tensor& yp, DType dtype) {
  const std::int64_t N = x.dim(0), H = w.fc_w.dim(2);
  const ExpertWeights wc = working_copy(w, dtype);
  acts.x = in_dtype(x, dtype);
  acts.h_pre = Tensor::empty({N, H}, dtype, MemCategory::kActivations);
  acts.h = Tensor::empty({N, H}, dtype, MemCategory::kActivations);
  if (N == 0) return;
  grouped_linear_forward(acts.x, wc.fc_w, wc.fc_b, offsets, acts.h_pre);
  layers::gelu_forward(acts.h_pre, acts.h);  // GPT-2's tanh GELU, as the dense MLP
  if (dtype == DType::kF32) {
    grouped_linear_forward(acts.h, wc.proj_w, wc.proj_b, offsets, yp);
    return;
  }
  Tensor y = Tensor::empty(yp.shape(), dtype, MemCategory::kActivations);
  grouped_linear_forward(acts.h, wc.proj_w, wc.proj_b, offsets, y);
  yp.copy_from(y);  // widened: exact
}

void experts_backward(const ExpertWeights& w, ExpertWeights& g, const ExpertActs& acts,
                      const Tensor& dyp, std::span<const std::int64_t> offsets, Tensor& dxp,
                      bool accumulate, DType dtype) {
  const std::int64_t N = acts.x.dim(0), H = w.fc_w.dim(2);
  const ExpertWeights wc = working_copy(w, dtype);
  const Tensor dy = in_dtype(dyp, dtype);
  Tensor dx = dtype == DType::kF32 ? dxp : Tensor::empty(dxp.shape(), dtype, MemCategory::kOther);
  Tensor dh = Tensor::empty({N, H}, dtype, MemCategory::kOther);
  if (N > 0) grouped_linear_backward(acts.h, wc.proj_w, dy, &dh, g.proj_w, g.proj_b, offsets, accumulate);
  else grouped_linear_backward(acts.h, wc.proj_w, dy, nullptr, g.proj_w, g.proj_b, offsets, accumulate);
  if (N > 0) layers::gelu_backward(acts.h_pre, dh, dh);
  grouped_linear_backward(acts.x, wc.fc_w, dh, N > 0 ? &dx : nullptr, g.fc_w, g.fc_b, offsets,
                          accumulate);
  if (dtype != DType::kF32 && N > 0) dxp.copy_from(dx);  // widened: exact
}

}  // namespace mixpar::ch09
