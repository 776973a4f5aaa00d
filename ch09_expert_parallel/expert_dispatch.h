// Dispatch and combine: how the permuted rows of each rank's tokens reach the ranks holding
// their experts and come back, over the ep group. Two ways, which the lesson compares:
// - all-to-all (Megatron-LM's alltoall dispatcher, GShard): the counts first, one all-to-all
//   of each rank's per-expert counts (so every rank knows what it will receive), then one
//   all-to-all of the rows: each rank sends only the rows its tokens route there, k/E of its
//   tokens' rows per expert on average.
// - all-gather (Megatron-LM's allgather dispatcher): every rank gathers every rank's tokens
//   and routing, runs its experts on the rows routed to them, and a reduce-scatter sums the
//   weighted outputs back to the tokens' ranks: ep times the tokens travel, whatever k.
// Both hand the experts the same rows in the same order, [local expert][source rank][token],
// so the experts' outputs and weight gradients are bit for bit the same either way, and the
// combine adds a token's terms in choice order (for k <= 2 a sum of two terms, which commutes
// exactly, so the reduce-scatter's rank order gives the same bits).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ch09_expert_parallel/permutation.h"
#include "ch09_expert_parallel/top_k.h"
#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch09 {

enum class DispatchKind : std::uint8_t { kAllToAll, kAllGather };
const char* dispatch_name(DispatchKind d);  // "all-to-all", "all-gather"

// ---- All-to-all.
struct AllToAllPlan {
  std::int64_t width = 0;                 // C: elements per row
  std::vector<std::int64_t> rows_to;      // [ep] rows this rank sends each rank
  std::vector<std::int64_t> rows_from;    // [ep] rows it receives from each
  std::vector<std::int64_t> offsets;      // [El + 1] the expert blocks of the received rows
  std::vector<std::int64_t> order;        // expert row i is received row order[i]
};
// The counts exchange: p's per-expert counts (global experts, E = ep x El) sent in blocks of
// El to their owners. Collective over ep.
AllToAllPlan plan_all_to_all(const Permutation& p, std::int64_t width, Communicator& ep);
// Local permuted rows [N, C] -> this rank's experts' rows [Ne, C] (all-to-all, then reorder).
void all_to_all_dispatch(const Tensor& local, const AllToAllPlan& plan, Communicator& ep,
                         Tensor& expert_rows);
// The way back: experts' rows [Ne, C] -> the local permuted rows [N, C].
void all_to_all_return(const Tensor& expert_rows, const AllToAllPlan& plan, Communicator& ep,
                       Tensor& local);

// ---- All-gather.
struct AllGatherPlan {
  std::int64_t tokens = 0;               // T per rank (the same on every rank)
  int k = 0;
  std::vector<std::int64_t> offsets;     // [El + 1] the expert blocks of the rows
  std::vector<std::int64_t> source;      // [Ne] global assignment (s T + t) k + j of each row
  std::vector<std::int64_t> row_of;      // [ep T k] row of each global assignment here, or -1
  std::vector<float> gate;               // [ep T k] every rank's gates
};
// Gathers every rank's routing (experts, kept flags, gates): collective over ep.
AllGatherPlan plan_all_gather(const Routing& r, const std::vector<char>& keep, int first_expert,
                              int local_experts, Communicator& ep);
// expert_rows [Ne, C] = gathered[source row] (times its gate when weighted), from this
// rank's local [T, C] gathered over ep into `gathered` [ep T, C].
void all_gather_dispatch(const Tensor& local, const AllGatherPlan& plan, Communicator& ep,
                         bool weighted, Tensor& gathered, Tensor& expert_rows);
// local [T, C] = this rank's tokens' sums of their rows' terms (times the gate when
// weighted), each rank's partial sums in choice order, summed over ep by a reduce-scatter.
void all_gather_combine(const Tensor& expert_rows, const AllGatherPlan& plan, Communicator& ep,
                        bool weighted, Tensor& local);
// d(gate) [T k] of this rank's assignments: <dy_t, y_row> computed where the row is, summed
// over ep by a reduce-scatter (one term per assignment).
std::vector<float> all_gather_gate_grads(const Tensor& dy_gathered, const Tensor& expert_out,
                                         const AllGatherPlan& plan, Communicator& ep);

// <a, b> of two rows of C FP32 values, in column order: every d(gate) is this sum.
float row_dot(const float* a, const float* b, std::int64_t C);

}  // namespace mixpar::ch09
