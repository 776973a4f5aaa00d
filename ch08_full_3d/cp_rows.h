// Context parallelism in the trainer (chapter 6, part 2): the cp ranks of one replica hold the
// same parameters and read the same samples, each its own rows of every sequence. So
//   - each rank's micro-batch is its rows (cp_rows: the zigzag positions of the batch), and
//   - each gradient is only its rows' share: chapter 6's rule (ch06_tensor_parallel/
//     cp_grad_sync.h: divided by cp, summed over the cp group) makes it the replica's before
//     the data-parallel sync sees it, which with the dp sync's mean is the mean over dp x cp --
//     the one-device gradient. ZeRO then shards over dp as before (every cp rank holds the
//     same shards), so checkpoints are unchanged: cp shards no parameter, and a run resumes
//     on any cp.
#pragma once

#include <cstdint>
#include <vector>

#include "io/token_loader.h"

namespace mixpar::ch08 {

// Rows `positions` of every sequence of b ([B, T] -> [B, positions.size()]).
TokenBatch cp_rows(const TokenBatch& b, const std::vector<std::int64_t>& positions);

}  // namespace mixpar::ch08
