#include "ch09_expert_parallel/lesson_measures.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "random/philox.h"

namespace mixpar::ch09 {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(const Tensor& a, const Tensor& b) { return same_bits(a.to_floats(), b.to_floats()); }

// max |a - b| / max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - b[i]));
    m = std::max(m, std::abs(double(b[i])));
  }
  return m > 0 ? d / m : d;
}

Tensor normal(Shape shape, std::uint64_t seed, float std) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  Philox g(seed, 7);
  fill_normal(t, g, 0.0f, std);
  return t;
}

void sgd(Tensor& p, const Tensor& g, float lr) {
  float* w = p.data_as<float>();
  const float* d = g.data_as<float>();
  for (std::int64_t i = 0; i < p.numel(); ++i) w[i] -= lr * d[i];
}


MoeConfig ep_config() {
  MoeConfig c = lesson_config();
  c.aux_loss_coef = 1e-2;
  c.z_loss_coef = 1e-3;
  c.bias_update_rate = 1e-3;
  return c;
}

EpComparison compare(const EpRun& a, const EpRun& ref) {
  EpComparison c;
  for (std::size_t r = 0; r < ref.y.size(); ++r) {
    c.y = c.y && same_bits(a.y[r], ref.y[r]);
    c.dx = c.dx && same_bits(a.dx[r], ref.dx[r]);
    c.bias = c.bias && same_bits(a.bias[r], ref.bias[r]);
  }
  c.router = same_bits(a.router_grad, ref.router_grad);
  for (const auto& [e, g] : ref.expert_grads) {
    c.expert_rel = std::max(c.expert_rel, rel_diff(a.expert_grads.at(e), g));
    c.experts_bitwise = c.experts_bitwise && same_bits(a.expert_grads.at(e), g);
  }
  return c;
}

}  // namespace mixpar::ch09
