// Exercise (chapter 4): the ring reduce-scatter, on nothing but "send to my right
// neighbour, receive from my left". The buffer is cut into n chunks (n = ranks; when n does
// not divide the size, the first size % n chunks are one element longer). In step s = 0..n-2
// rank r sends its chunk (r - s) mod n to rank r + 1 and adds the chunk it receives, which is
// chunk (r - s - 1) mod n, into its own copy. After n - 1 steps rank r holds chunk (r + 1) mod n
// summed over every rank. See ch04_ddp/README.md, section 1 (and the demo's first table).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace mixpar::exercises {

// Sends `to_right` to rank (rank + 1) mod n and returns what rank (rank - 1) mod n sent in
// the same step.
using RingExchange = std::function<std::vector<float>(const std::vector<float>& to_right)>;

// [begin, end) of chunk c of a buffer of `size` elements cut into n chunks as above.
struct ChunkRange {
  std::int64_t begin = 0, end = 0;
};
ChunkRange ring_chunk(std::int64_t size, int n, int c);

// Rank `rank` of n: reduce-scatters buf in place (only chunk (rank + 1) mod n is complete
// afterwards). Calls exchange exactly n - 1 times.
void ring_reduce_scatter(int rank, int n, std::vector<float>& buf, const RingExchange& exchange);

}  // namespace mixpar::exercises
