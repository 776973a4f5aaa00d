#include "ch09_expert_parallel/permutation.h"

#include <cstring>

namespace mixpar::ch09 {

Permutation make_permutation(const Routing& r, const std::vector<char>& keep, int n_experts) {
  Permutation p;
  p.n_experts = n_experts;
  p.k = r.k;
  p.tokens = r.tokens;
  p.counts.assign(static_cast<std::size_t>(n_experts), 0);
  for (std::size_t a = 0; a < r.expert.size(); ++a) {
    if (keep[a]) ++p.counts[std::size_t(r.expert[a])];
  }
  p.offsets.assign(static_cast<std::size_t>(n_experts) + 1, 0);
  for (int e = 0; e < n_experts; ++e) {
    p.offsets[std::size_t(e) + 1] = p.offsets[std::size_t(e)] + p.counts[std::size_t(e)];
  }
  p.source.resize(static_cast<std::size_t>(p.rows()));
  p.row_of.assign(r.expert.size(), -1);
  std::vector<std::int64_t> next(p.offsets.begin(), p.offsets.end() - 1);
  for (std::size_t a = 0; a < r.expert.size(); ++a) {  // token order within each expert
    if (!keep[a]) continue;
    const std::int64_t row = next[std::size_t(r.expert[a])]++;
    p.source[std::size_t(row)] = static_cast<std::int64_t>(a);
    p.row_of[a] = row;
  }
  return p;
}

void permute_rows(const Tensor& x, const Permutation& p, Tensor& xp) {
  const std::int64_t C = x.dim(1);
  const float* in = x.data_as<float>();
  float* out = xp.data_as<float>();
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const std::int64_t t = p.source[std::size_t(row)] / p.k;
    std::memcpy(out + row * C, in + t * C, sizeof(float) * std::size_t(C));
  }
}

void unpermute_rows(const Tensor& yp, const Permutation& p, std::span<const float> weights,
                    Tensor& y) {
  const std::int64_t C = y.dim(1);
  const float* in = yp.data_as<float>();
  float* out = y.data_as<float>();
  for (std::int64_t t = 0; t < p.tokens; ++t) {
    float* dst = out + t * C;
    bool first = true;
    for (int j = 0; j < p.k; ++j) {
      const std::size_t a = static_cast<std::size_t>(t * p.k + j);
      const std::int64_t row = p.row_of[a];
      if (row < 0) continue;
      const float* src = in + row * C;
      for (std::int64_t c = 0; c < C; ++c) {
        const float term = weights.empty() ? src[c] : weights[a] * src[c];
        dst[c] = first ? term : dst[c] + term;
      }
      first = false;
    }
    if (first) std::memset(dst, 0, sizeof(float) * std::size_t(C));
  }
}

void unpermute_backward(const Tensor& dy, const Permutation& p, std::span<const float> weights,
                        Tensor& dyp) {
  const std::int64_t C = dy.dim(1);
  const float* in = dy.data_as<float>();
  float* out = dyp.data_as<float>();
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const std::size_t a = static_cast<std::size_t>(p.source[std::size_t(row)]);
    const std::int64_t t = static_cast<std::int64_t>(a) / p.k;
    for (std::int64_t c = 0; c < C; ++c) {
      out[row * C + c] = weights.empty() ? in[t * C + c] : weights[a] * in[t * C + c];
    }
  }
}

}  // namespace mixpar::ch09
