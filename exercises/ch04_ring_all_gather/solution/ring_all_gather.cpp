#include "ch04_ring_all_gather/ring_all_gather.h"

#include <algorithm>
#include <cstddef>

#include "comm/communicator.h"

namespace mixpar::exercises {

void ring_all_gather(int rank, int n, std::vector<float>& buf, const RingSendRecv& exchange) {
  const auto size = static_cast<std::int64_t>(buf.size());
  const auto mod = [n](int v) { return ((v % n) + n) % n; };
  // Step s: send the chunk completed s steps ago (own chunk r + 1 first), receive the one the
  // left neighbour completed s steps ago: chunk r - s, which it sends on at step s + 1.
  for (int s = 0; s < n - 1; ++s) {
    const ChunkRange out = ring_chunk(size, n, mod(rank + 1 - s));
    const std::vector<float> send(buf.begin() + out.begin, buf.begin() + out.begin + out.count);
    const std::vector<float> got = exchange(send);
    const ChunkRange in = ring_chunk(size, n, mod(rank - s));
    std::copy(got.begin(), got.end(), buf.begin() + in.begin);
  }
}

}  // namespace mixpar::exercises
