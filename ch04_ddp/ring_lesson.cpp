// Trace and traffic of the lesson's all-reduces, each on a fresh local world so that the
// recorded traffic is that of one call and nothing else.
#include "ring_lesson.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "report/format.h"
#include "report/text_table.h"
#include "comm/local_backend.h"

namespace mixpar::ch04 {
namespace {

std::string values(const std::vector<float>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ' ';
    s += fmt("%g", v[i]);
  }
  s += ']';
  return s;
}

// "c2 [300] from 2", or "-" when nothing moved that way.
std::string side(int chunk, const std::vector<float>& v, const char* dir, int peer) {
  if (peer < 0 || v.empty()) return "-";
  std::string s = chunk >= 0 ? fmt("c%d ", chunk) : std::string();
  s += values(v);
  s += fmt(" %s %d", dir, peer);
  return s;
}

int phase_order(const std::string& phase) {
  if (phase == "reduce-scatter" || phase == "reduce") return 0;
  return 1;
}

std::vector<RingEvent> in_time_order(const std::vector<std::vector<RingEvent>>& per_rank) {
  std::vector<RingEvent> all;
  for (const auto& events : per_rank) all.insert(all.end(), events.begin(), events.end());
  std::stable_sort(all.begin(), all.end(), [](const RingEvent& a, const RingEvent& b) {
    return std::tuple(phase_order(a.phase), a.step, a.rank) <
           std::tuple(phase_order(b.phase), b.step, b.rank);
  });
  return all;
}

}  // namespace

float trace_value(int rank, std::int64_t i) {
  return static_cast<float>(i + 1) * std::pow(10.0f, static_cast<float>(rank));
}

std::vector<std::vector<RingEvent>> trace_all_reduce(int n, std::int64_t numel, bool naive) {
  std::vector<std::vector<RingEvent>> per_rank(static_cast<std::size_t>(n));
  run_local(n, [&](Communicator& c) {
    std::vector<float> v(static_cast<std::size_t>(numel));
    for (std::int64_t i = 0; i < numel; ++i) v[std::size_t(i)] = trace_value(c.rank(), i);
    Tensor buf = Tensor::from_floats(v, {numel});
    RingOptions o;
    o.slice_bytes = 0;
    o.trace = &per_rank[static_cast<std::size_t>(c.rank())];  // each rank its own slot
    if (naive) naive_all_reduce(c, buf, ReduceOp::kSum, o);
    else ring_all_reduce(c, buf, ReduceOp::kSum, o);
  });
  return per_rank;
}

std::string format_ring_trace(const std::vector<std::vector<RingEvent>>& per_rank) {
  TextTable t({"phase", "step", "rank", "sends", "receives", "now holds"});
  for (const RingEvent& e : in_time_order(per_rank)) {
    std::string holds = e.got_chunk >= 0 ? fmt("c%d = ", e.got_chunk) : std::string();
    holds += values(e.result);
    t.add({e.phase, std::to_string(e.step), std::to_string(e.rank),
           side(e.sent_chunk, e.sent, "to", e.to), side(e.got_chunk, e.got, "from", e.from),
           holds});
  }
  return t.str();
}

std::size_t TrafficMeasure::max_sent() const {
  std::size_t m = 0;
  for (const TrafficTotals& t : per_rank) m = std::max(m, t.bytes_sent);
  return m;
}

std::size_t TrafficMeasure::max_received() const {
  std::size_t m = 0;
  for (const TrafficTotals& t : per_rank) m = std::max(m, t.bytes_received);
  return m;
}

TrafficMeasure measure_traffic(AllReduceAlgo algo, int n, std::int64_t numel) {
  TrafficMeasure m{algo, n, static_cast<std::size_t>(numel) * 4, {}};
  LocalWorld world(n);
  RingOptions hops;
  hops.oneshot_max_bytes = hops.exchange_max_bytes = 0;  // the hops' own traffic, any size
  world.run([&](Communicator& c) {
    Tensor buf = Tensor::zeros({numel}, DType::kF32);
    all_reduce_with(algo, c, buf, ReduceOp::kSum, hops);
  });
  for (int r = 0; r < n; ++r) m.per_rank.push_back(world.comm(r).traffic().total());
  return m;
}

}  // namespace mixpar::ch04
