#include "ch04_ring_reduce_scatter/ring_reduce_scatter.h"

#include <cstddef>

namespace mixpar::exercises {

ChunkRange ring_chunk(std::int64_t size, int n, int c) {
  const std::int64_t base = size / n, extra = size % n;
  const std::int64_t begin = c * base + (c < extra ? c : extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

void ring_reduce_scatter(int rank, int n, std::vector<float>& buf, const RingExchange& exchange) {
  const auto size = static_cast<std::int64_t>(buf.size());
  const auto mod = [n](int v) { return ((v % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    const ChunkRange out = ring_chunk(size, n, mod(rank - s));
    const std::vector<float> send(buf.begin() + out.begin, buf.begin() + out.end);
    const std::vector<float> got = exchange(send);
    const ChunkRange in = ring_chunk(size, n, mod(rank - s - 1));
    for (std::int64_t i = in.begin; i < in.end; ++i) {
      buf[static_cast<std::size_t>(i)] += got[static_cast<std::size_t>(i - in.begin)];
    }
  }
}

}  // namespace mixpar::exercises
