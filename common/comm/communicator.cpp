// The backend-independent pieces of the communicator: names, and the ring's chunking and
// volume formula that every backend's traffic accounting (and chapter 4's ring) share.

#include "comm/communicator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "comm/local_kernels.h"

namespace mixpar {

void check_watchdog_seconds(const std::string& what, double seconds) {
  if (std::isnan(seconds) || seconds > kMaxWatchdogSeconds) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", seconds);
    throw InputError(what + ": a watchdog limit of " + text +
                     " s is out of range (at most 1e6 s, about 11.6 days; <= 0 turns it off)");
  }
}

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

TrafficTotals all_reduce_traffic(std::int64_t numel, std::size_t element_bytes, int size,
                                 int rank) {
  const auto chunk_bytes = [&](int c) {
    return static_cast<std::size_t>(ring_chunk(numel, size, c % size).count) * element_bytes;
  };
  const std::size_t twice = 2 * static_cast<std::size_t>(numel) * element_bytes;
  TrafficTotals t;
  t.calls = 1;
  t.bytes_sent = twice - chunk_bytes(rank + 1) - chunk_bytes(rank + 2);
  t.bytes_received = twice - chunk_bytes(rank) - chunk_bytes(rank + 1);
  return t;
}

TrafficTotals all_reduce_traffic(std::int64_t numel, DType dtype, int size, int rank) {
  return all_reduce_traffic(numel, dtype_size(dtype), size, rank);
}

TrafficTotals all_to_all_traffic(std::span<const std::int64_t> send_counts,
                                 std::span<const std::int64_t> recv_counts, std::int64_t in_numel,
                                 std::int64_t out_numel, DType dtype, int size, int rank) {
  const auto n = static_cast<std::size_t>(size);
  if (send_counts.size() != n || recv_counts.size() != n) {
    throw std::invalid_argument("all_to_all: " + std::to_string(send_counts.size()) +
                                " send counts and " + std::to_string(recv_counts.size()) +
                                " receive counts for " + std::to_string(size) + " ranks");
  }
  std::int64_t sent = 0, received = 0, in_sum = 0, out_sum = 0;
  for (std::size_t q = 0; q < n; ++q) {
    if (send_counts[q] < 0 || recv_counts[q] < 0) {
      throw std::invalid_argument("all_to_all: a negative count for rank " + std::to_string(q));
    }
    in_sum += send_counts[q];
    out_sum += recv_counts[q];
    if (static_cast<int>(q) == rank) continue;
    sent += send_counts[q];
    received += recv_counts[q];
  }
  if (in_sum != in_numel || out_sum != out_numel) {
    throw std::invalid_argument("all_to_all: counts sum to " + std::to_string(in_sum) + " sent and " +
                                std::to_string(out_sum) + " received, but the tensors hold " +
                                std::to_string(in_numel) + " and " + std::to_string(out_numel));
  }
  TrafficTotals t;
  t.calls = 1;
  t.bytes_sent = static_cast<std::size_t>(sent) * dtype_size(dtype);
  t.bytes_received = static_cast<std::size_t>(received) * dtype_size(dtype);
  return t;
}

void Communicator::check_reduce_hop(const Tensor& recv_t, const Tensor& own, const Tensor& out) {
  for (const Tensor* t : {&recv_t, &own, &out}) {
    if (!t->defined() || !t->is_cpu()) {
      throw std::invalid_argument("sendrecv_reduce: the reduction runs on host tensors");
    }
  }
  if (own.numel() != recv_t.numel() || out.numel() != recv_t.numel()) {
    throw std::invalid_argument("sendrecv_reduce: " + std::to_string(recv_t.numel()) +
                                " elements received, " + std::to_string(own.numel()) +
                                " own, " + std::to_string(out.numel()) + " out");
  }
}

void Communicator::sendrecv_reduce(const Tensor& send_t, int dst, Tensor& recv_t, int src,
                                   const Tensor& own, Tensor& out, ReduceOp op, int tag) {
  check_reduce_hop(recv_t, own, out);
  sendrecv(send_t, dst, recv_t, src, tag);
  const auto bytes = [](const Tensor& t) { return static_cast<std::byte*>(t.data()); };
  local::combine_elements(bytes(recv_t), recv_t.dtype(), bytes(own), own.dtype(), bytes(out),
                          out.dtype(), out.numel(), op);
}

}  // namespace mixpar
