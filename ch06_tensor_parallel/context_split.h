// Context parallelism's split of one sequence over cp ranks: which positions each rank holds,
// and how much attention work each one then does.
//
// Causal attention makes a contiguous split unfair: rank r's queries attend to every key
// before them, so with cp chunks of c = T / cp positions rank r computes r full blocks and one
// diagonal one, the last rank about 2cp / (cp + 1) times the average (2x for large cp). The
// balanced ("zigzag") split of Megatron-LM's context parallelism and torchtitan cuts the
// sequence into 2 cp chunks and gives rank r chunks r and 2cp - 1 - r: an early chunk with
// little to attend to paired with a late one with much, every rank 2cp - 1 full chunk pairs
// and 2 diagonal ones (Liu et al. 2023 ring attention; Brandon et al. 2023 striped attention
// make the same point with another layout). Positions, targets and the loss follow the
// tokens' true positions whatever the split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar::ch06 {

enum class CpSplit : std::uint8_t { kContiguous, kZigzag };
std::string_view cp_split_name(CpSplit split);  // "contiguous", "zigzag"

// A run of global positions [begin, begin + count).
struct SeqChunk {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

// The chunks rank `rank` of `cp` holds, in the order its rows store them: contiguous, one
// chunk [rT/cp, (r+1)T/cp); zigzag, chunk r then chunk 2cp-1-r of size T/(2cp). Throws
// InputError naming the numbers when T is not divisible by cp (contiguous) or 2cp (zigzag).
std::vector<SeqChunk> cp_chunks(std::int64_t seq_len, int cp, int rank, CpSplit split);

// Every rank's chunks (index: cp rank): what a ring needs to know where a K/V block it
// receives sits in the sequence.
struct CpLayout {
  std::int64_t seq_len = 0;
  int cp = 1;
  CpSplit split = CpSplit::kZigzag;
  std::vector<std::vector<SeqChunk>> chunks;
  std::int64_t local_len() const { return seq_len / cp; }
};
CpLayout cp_layout(std::int64_t seq_len, int cp, CpSplit split);

// The global positions of a rank's rows, in row order (wpe rows, targets, loss positions).
std::vector<std::int64_t> chunk_positions(const std::vector<SeqChunk>& chunks);

// Rows of a [B, T, ...] tensor at `positions` along dim 1: [B, positions.size(), ...], and
// the inverse write of such a shard into a [B, T, ...] tensor. Any dtype, host tensors.
Tensor take_positions(const Tensor& full, const std::vector<std::int64_t>& positions);
void put_positions(const Tensor& shard, const std::vector<std::int64_t>& positions, Tensor& full);

// Attention work of one rank, counted per (batch, head) in chunk pairs: a query chunk against
// a key chunk is full (every key before every query), diagonal (the causal mask cuts it) or
// skipped (every key after every query); scores = query-key products computed (a diagonal
// block is computed whole and masked, as a blocked kernel does).
struct CpWork {
  std::int64_t full = 0, diagonal = 0, skipped = 0;
  std::int64_t scores = 0;
  std::int64_t computed() const { return full + diagonal; }
};
enum class BlockKind : std::uint8_t { kFull, kDiagonal, kSkipped };
BlockKind classify_block(const SeqChunk& q, const SeqChunk& k);
const char* block_kind_name(BlockKind kind);

// What rank `rank` computes in a ring over `layout`: its chunks against every chunk.
CpWork expected_work(const CpLayout& layout, int rank);
// max over ranks / mean over ranks of the scores computed: 2cp/(cp+1) contiguous, 1 zigzag.
double work_imbalance(const std::vector<CpWork>& per_rank);

}  // namespace mixpar::ch06
