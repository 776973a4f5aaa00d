#include "ch06_vocab_parallel_embedding/vocab_parallel_embedding.h"

#include <cstddef>

namespace mixpar::exercises {

VocabShard vocab_shard(std::int64_t vocab, int tp, int rank) {
  const std::int64_t padded = (vocab + tp - 1) / tp * tp;
  const std::int64_t rows = padded / tp;
  return {rank * rows, rows};
}

std::vector<float> vocab_parallel_embedding(const std::vector<std::int32_t>& tokens,
                                            std::int64_t seq, const std::vector<float>& wte_shard,
                                            VocabShard shard, const std::vector<float>& wpe,
                                            std::int64_t n_embd, int rank) {
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> out(at(n * n_embd), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t local = tokens[at(i)] - shard.begin;
    const bool owned = local >= 0 && local < shard.rows;
    const std::int64_t t = i % seq;
    for (std::int64_t c = 0; c < n_embd; ++c) {
      float v = owned ? wte_shard[at(local * n_embd + c)] : 0.0f;
      if (rank == 0) v += wpe[at(t * n_embd + c)];
      out[at(i * n_embd + c)] = v;
    }
  }
  return out;
}

}  // namespace mixpar::exercises
