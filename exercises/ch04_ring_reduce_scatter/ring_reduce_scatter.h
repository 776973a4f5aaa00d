// Exercise (chapter 4): the ring reduce-scatter, on nothing but "send to my right
// neighbour, receive from my left". n ranks each hold a buffer of the same size, cut into n
// chunks; afterwards rank r's chunk (r + 1) mod n holds that chunk summed over every rank's
// buffer (the ownership convention of ch04_ddp/ring_allreduce.h, ring_owned_chunk).
//
// The rules a ring must keep (and the tests check):
//   - the only communication is exchange(): each rank calls it exactly n - 1 times, sending one
//     chunk per call, and never the same chunk twice: n - 1 of its n chunks in all (the test
//     counts the elements: all but those of the chunk the rank ends up owning);
//   - every element of the owned chunk is the sum of exactly n values, one from each rank;
//   - what a rank sends is one of its chunks as it holds it at that moment (its own values,
//     plus what it has added in so far): each call, every chunk's partial sum that is passed
//     on should carry one rank more than before.
// Which chunk to send at each call is yours to find: start from where chunk (r + 1) mod n must
// end up, and from the fact that all ranks call exchange() in the same step at once.
// See ch04_ddp/README.md, section 1 (and the demo's first table).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace mixpar::exercises {

// Sends `to_right` to rank (rank + 1) mod n and returns what rank (rank - 1) mod n sent in
// the same step.
using RingExchange = std::function<std::vector<float>(const std::vector<float>& to_right)>;

// [begin, end) of chunk c of a buffer of `size` elements cut into n chunks: the chunks cover
// [0, size) in order, without gaps or overlap, their lengths differ by at most one, and the
// longer ones come first.
struct ChunkRange {
  std::int64_t begin = 0, end = 0;
};
ChunkRange ring_chunk(std::int64_t size, int n, int c);

// Rank `rank` of n: reduce-scatters buf in place. Afterwards chunk (rank + 1) mod n is the sum
// over the ranks; what the other chunks hold is unspecified (partial sums).
void ring_reduce_scatter(int rank, int n, std::vector<float>& buf, const RingExchange& exchange);

}  // namespace mixpar::exercises
