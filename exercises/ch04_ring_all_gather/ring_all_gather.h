// Exercise (chapter 4): the ring all-gather, the second half of the ring all-reduce. After the
// reduce-scatter (this chapter's other exercise) rank r holds one chunk complete, chunk
// ring_owned_chunk(r) = (r + 1) mod n; the all-gather gives every rank every complete chunk,
// again on nothing but "send to my right neighbour, receive from my left".
//
// The rules (the tests check them, and compare the result with chapter 4's
// ring_all_gather_inplace, ch04_ddp/ring_allreduce.h, run on a local group of threads):
//   - chunks are the project's ring_chunk(size, n, c) (common/comm/communicator.h: begin and
//     count);
//   - the only communication is exchange(): each rank calls it exactly n - 1 times, sending
//     one complete chunk per call (so (n - 1)/n of the buffer in all, the same bytes as the
//     reduce-scatter: together the 2 (n - 1)/n of the ring all-reduce);
//   - a rank forwards only chunks that are already complete on it: its own, or one it has
//     received; chunks arrive by value, so the result is bit-identical on every rank;
//   - afterwards every chunk c of buf equals the owner's chunk c (the other chunks of the
//     input are overwritten, whatever they held).
// See ch04_ddp/README.md, section 1.
#pragma once

#include <functional>
#include <vector>

namespace mixpar::exercises {

// Sends `to_right` to rank (rank + 1) mod n and returns what rank (rank - 1) mod n sent in
// the same step.
using RingSendRecv = std::function<std::vector<float>(const std::vector<float>& to_right)>;

// Rank `rank` of n: buf's chunk (rank + 1) mod n is complete on entry; on return every chunk is.
void ring_all_gather(int rank, int n, std::vector<float>& buf, const RingSendRecv& exchange);

}  // namespace mixpar::exercises
