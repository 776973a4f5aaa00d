// Exercise (chapter 6): the vocab-parallel token + position embedding of tensor-parallel rank
// `rank` of tp (Megatron-LM's VocabParallelEmbedding). The token embedding wte [V, C] is split
// by vocabulary rows:
//   - the vocabulary is padded to padded_vocab(V, tp), V rounded up to a multiple of tp, so
//     that every rank holds the same number of rows (the padding rows are zeros and no token
//     has their ids); rank r holds the r-th of tp equal blocks of rows;
//   - a rank writes the embedding rows of the tokens it holds and zeros for the others, and
//     exactly one rank (tp rank 0) adds the position embedding wpe[t] to the rows of position
//     t, so that one all-reduce SUM over the tp group completes every row: after it, every
//     rank holds the unsplit model's embedding (each element is the sum of the token's row on
//     its one owner, the position's on rank 0, and zeros).
// Row-major float vectors; tokens [B, T] flattened, out [B, T, C]. See
// ch06_tensor_parallel/README.md (Vocab-parallel embedding); the tests compare with the model's
// layers::embedding_forward (common/model/layers.h) and padded_vocab
// (common/model/gpt_params.h).
#pragma once

#include <cstdint>
#include <vector>

namespace mixpar::exercises {

struct VocabShard {
  std::int64_t begin = 0;  // the first vocabulary id rank r holds
  std::int64_t rows = 0;   // how many (the same on every rank, padding included)
};
VocabShard vocab_shard(std::int64_t vocab, int tp, int rank);

// This rank's addend of the embedding: tokens [B * T] (ids in [0, vocab)), wte_shard
// [shard.rows, n_embd], wpe [>= seq, n_embd]. Returns [B * T, n_embd].
std::vector<float> vocab_parallel_embedding(const std::vector<std::int32_t>& tokens,
                                            std::int64_t seq, const std::vector<float>& wte_shard,
                                            VocabShard shard, const std::vector<float>& wpe,
                                            std::int64_t n_embd, int rank);

}  // namespace mixpar::exercises
