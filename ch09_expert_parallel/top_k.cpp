#include "ch09_expert_parallel/top_k.h"

#include <stdexcept>

namespace mixpar::ch09 {

Routing select_top_k(const Tensor& probs, std::span<const float> bias, int k, bool normalize) {
  const std::int64_t T = probs.dim(0), E = probs.dim(1);
  if (k < 1 || k > E) throw std::invalid_argument("select_top_k: k outside [1, E]");
  if (!bias.empty() && static_cast<std::int64_t>(bias.size()) != E) {
    throw std::invalid_argument("select_top_k: bias must have E entries");
  }
  const float* p = probs.data_as<float>();
  Routing r;
  r.tokens = T;
  r.k = k;
  const auto n = static_cast<std::size_t>(T * k);
  r.expert.resize(n);
  r.prob.resize(n);
  r.gate.resize(n);
  r.denom.assign(static_cast<std::size_t>(T), 1.0f);
  std::vector<char> taken(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < T; ++t) {
    std::fill(taken.begin(), taken.end(), 0);
    const float* row = p + t * E;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      float best_score = 0;
      for (int e = 0; e < E; ++e) {
        if (taken[std::size_t(e)]) continue;
        const float score = bias.empty() ? row[e] : row[e] + bias[std::size_t(e)];
        if (best < 0 || score > best_score) best = e, best_score = score;
      }
      taken[std::size_t(best)] = 1;
      const std::size_t a = static_cast<std::size_t>(t * k + j);
      r.expert[a] = best;
      r.prob[a] = row[best];
      sum += row[best];
    }
    if (normalize) r.denom[std::size_t(t)] = sum;
    for (int j = 0; j < k; ++j) {
      const std::size_t a = static_cast<std::size_t>(t * k + j);
      r.gate[a] = normalize ? r.prob[a] / sum : r.prob[a];
    }
  }
  return r;
}

void gate_backward(const Routing& r, std::span<const float> dgate, bool normalize,
                   Tensor& dprobs) {
  const std::int64_t E = dprobs.dim(1);
  float* dp = dprobs.data_as<float>();
  for (std::int64_t t = 0; t < r.tokens; ++t) {
    const std::size_t a0 = static_cast<std::size_t>(t * r.k);
    float dot = 0;
    if (normalize) {
      for (int j = 0; j < r.k; ++j) dot += dgate[a0 + std::size_t(j)] * r.gate[a0 + std::size_t(j)];
    }
    for (int j = 0; j < r.k; ++j) {
      const std::size_t a = a0 + std::size_t(j);
      const float d = normalize ? (dgate[a] - dot) / r.denom[std::size_t(t)] : dgate[a];
      dp[t * E + r.expert[a]] += d;
    }
  }
}

}  // namespace mixpar::ch09
