#include "ch09_expert_parallel/load_balance.h"

#include <algorithm>
#include <cmath>

namespace mixpar::ch09 {
namespace {

double logsumexp_row(const float* l, std::int64_t E) {
  float m = l[0];
  for (std::int64_t e = 1; e < E; ++e) m = std::fmax(m, l[e]);
  double sum = 0;
  for (std::int64_t e = 0; e < E; ++e) sum += std::exp(double(l[e]) - m);
  return m + std::log(sum);
}

}  // namespace

BalanceStats balance_stats(const Routing& r, const Tensor& probs, const Tensor& logits,
                           Communicator* group) {
  const std::int64_t T = probs.dim(0), E = probs.dim(1);
  const float* p = probs.data_as<float>();
  std::vector<double> v(static_cast<std::size_t>(2 * E + 2), 0.0);
  for (int e : r.expert) v[std::size_t(e)] += 1;
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t e = 0; e < E; ++e) v[std::size_t(E + e)] += p[t * E + e];
    const double lse = logsumexp_row(logits.data_as<float>() + t * E, E);
    v[std::size_t(2 * E)] += lse * lse;
  }
  v[std::size_t(2 * E + 1)] = double(T);
  if (group != nullptr && group->size() > 1) {
    Tensor t = Tensor::empty({std::int64_t(v.size())}, DType::kF64, MemCategory::kCommBuffers);
    std::copy(v.begin(), v.end(), t.data_as<double>());
    group->all_reduce(t);
    std::copy(t.data_as<double>(), t.data_as<double>() + v.size(), v.begin());
  }
  BalanceStats s;
  s.counts.assign(v.begin(), v.begin() + E);
  s.prob_sums.assign(v.begin() + E, v.begin() + 2 * E);
  s.lse_sq_sum = v[std::size_t(2 * E)];
  s.tokens = v[std::size_t(2 * E + 1)];
  return s;
}

double aux_loss(const BalanceStats& s, int k) {
  const double E = double(s.counts.size());
  double sum = 0;
  for (std::size_t e = 0; e < s.counts.size(); ++e) {
    sum += (s.counts[e] / (s.tokens * k)) * (s.prob_sums[e] / s.tokens);
  }
  return E * sum;
}

double z_loss(const BalanceStats& s) { return s.lse_sq_sum / s.tokens; }

void add_aux_loss_grad(const BalanceStats& s, int k, float seed, Tensor& dprobs,
                       double tokens_override) {
  const std::int64_t T = dprobs.dim(0), E = dprobs.dim(1);
  const double tokens = tokens_override > 0 ? tokens_override : s.tokens;
  std::vector<float> g(static_cast<std::size_t>(E));
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = s.counts[std::size_t(e)] / (s.tokens * k);
    g[std::size_t(e)] = static_cast<float>(double(seed) * double(E) * f / tokens);
  }
  float* dp = dprobs.data_as<float>();
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t e = 0; e < E; ++e) dp[t * E + e] += g[std::size_t(e)];
  }
}

void add_z_loss_grad(const BalanceStats& s, const Tensor& logits, const Tensor& probs, float seed,
                     Tensor& dlogits) {
  const std::int64_t T = logits.dim(0), E = logits.dim(1);
  const float* p = probs.data_as<float>();
  float* dl = dlogits.data_as<float>();
  for (std::int64_t t = 0; t < T; ++t) {
    const double lse = logsumexp_row(logits.data_as<float>() + t * E, E);
    const float c = static_cast<float>(2.0 * double(seed) * lse / s.tokens);
    for (std::int64_t e = 0; e < E; ++e) dl[t * E + e] += c * p[t * E + e];
  }
}

void update_expert_bias(std::vector<float>& bias, std::span<const double> counts, float rate) {
  double mean = 0;
  for (double c : counts) mean += c;
  mean /= double(counts.size());
  for (std::size_t e = 0; e < bias.size(); ++e) {
    const double d = mean - counts[e];
    bias[e] += d > 0 ? rate : d < 0 ? -rate : 0.0f;
  }
}

}  // namespace mixpar::ch09
