// The count-once rule of the global gradient norm. clip_grad_norm_ on one device sums the
// squares of every gradient element once. Split over a grid, a parameter can be held by many
// ranks: whole on every dp replica, whole on every tp rank (LayerNorms, row-parallel biases),
// on two pipeline stages (the tied wte), or in pieces (column/row/vocab shards, ZeRO shards).
// Summing every rank's squares would count some elements dp, tp or 2 times: a norm too large,
// clipping that fires too early, and a trajectory that no longer equals one device's. So each
// element is counted by exactly one rank, its owner:
//   - of the dp replicas (and the cp ranks, which hold the same parameters), dp and cp rank 0
//     (ZeRO, whose gradients are sharded over dp, counts each
//     shard on the rank that owns it instead: chapter 5);
//   - of a parameter replicated across tp, tp rank 0; a tp shard on the rank holding it;
//   - of the tied wte, the first pipeline stage (the last stage's copy is not counted).
// Then the norm is sqrt(sum over the world of each rank's counted squares).
#pragma once

#include <span>
#include <vector>

#include "comm/parallel_grid.h"
#include "model/gpt_params.h"

namespace mixpar {

// The elements of e's full tensor that this rank (at `at` in the grid) counts: held_elements()
// of e when it is the owner, nothing otherwise.
std::vector<ElementRange> norm_elements(const ParamEntry& e, const GridCoord& at);
// Per entry of a registry, in order: whether this rank counts it (all of its held elements).
std::vector<bool> norm_counted(std::span<const ParamEntry> entries, const GridCoord& at);

// sum over i with counted[i] of ops::sum_of_squares(grads[i]), in FP64 and in order: with
// every entry counted, exactly the sum global_grad_norm takes the root of.
double counted_sum_of_squares(std::span<const Tensor> grads, const std::vector<bool>& counted);

}  // namespace mixpar
