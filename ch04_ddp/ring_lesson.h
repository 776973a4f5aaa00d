// The ring's lesson material: the chunk-by-chunk trace of a small ring (what every rank sends,
// receives and holds after each step), and the per-rank traffic of the ring, the naive
// all-reduce and the backend's own, as the communicator recorded it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ch04_ddp/ring_allreduce.h"
#include "comm/communicator.h"

namespace mixpar::ch04 {

// Element i of rank r's buffer in the trace: (i + 1) * 10^r, so every sum shows its terms.
float trace_value(int rank, std::int64_t i);

// Runs a ring (or naive) all-reduce of `numel` f32 on a local world of n ranks with whole
// chunks (no slicing) and returns each rank's events, by rank.
std::vector<std::vector<RingEvent>> trace_all_reduce(int n, std::int64_t numel, bool naive);

// One line per event, in time order (phase, step, rank):
//   "reduce-scatter  0  rank 0  sends c0 [1] to 1  gets c2 [300] from 2  -> c2 = [303]"
std::string format_ring_trace(const std::vector<std::vector<RingEvent>>& per_rank);

// What one all-reduce of `numel` f32 elements put on each rank's links, by rank, summed over
// every op the algorithm used.
struct TrafficMeasure {
  AllReduceAlgo algo;
  int ranks = 0;
  std::size_t buffer_bytes = 0;
  std::vector<TrafficTotals> per_rank;
  std::size_t max_sent() const;      // the busiest rank's bytes sent
  std::size_t max_received() const;  // the busiest rank's bytes received
};
TrafficMeasure measure_traffic(AllReduceAlgo algo, int n, std::int64_t numel);

}  // namespace mixpar::ch04
