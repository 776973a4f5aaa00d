// The backend-independent pieces of the communicator: names, and the ring's chunking and
// volume formula that every backend's traffic accounting (and chapter 4's ring) share.

#include "comm/communicator.h"

#include <algorithm>
#include <stdexcept>

namespace mixpar {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

ChunkRange ring_chunk(std::int64_t numel, int parts, int index) {
  if (numel < 0 || parts < 1 || index < 0 || index >= parts) {
    throw std::invalid_argument("ring_chunk: chunk " + std::to_string(index) + " of " +
                                std::to_string(parts) + " over " + std::to_string(numel) +
                                " elements");
  }
  const std::int64_t base = numel / parts;
  const std::int64_t longer = numel % parts;  // the first `longer` chunks get one more element
  const std::int64_t i = index;
  return {i * base + std::min(i, longer), base + (i < longer ? 1 : 0)};
}

TrafficTotals all_reduce_traffic(std::int64_t numel, DType dtype, int size, int rank) {
  const auto chunk_bytes = [&](int c) {
    return static_cast<std::size_t>(ring_chunk(numel, size, c % size).count) * dtype_size(dtype);
  };
  const std::size_t twice = 2 * static_cast<std::size_t>(numel) * dtype_size(dtype);
  TrafficTotals t;
  t.calls = 1;
  t.bytes_sent = twice - chunk_bytes(rank + 1) - chunk_bytes(rank + 2);
  t.bytes_received = twice - chunk_bytes(rank) - chunk_bytes(rank + 1);
  return t;
}

}  // namespace mixpar
