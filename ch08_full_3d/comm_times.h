// A step's communication time per group of the mesh, as one rank saw it: what the grid's clock
// (comm/timed_communicator.h) measured inside each group's calls, split into the part the
// compute thread spent (exposed: a tp or cp collective between two GEMMs, a pipeline send or
// receive, a vote) and the part other threads spent (chapter 4's buckets during backward),
// plus the compute thread's wait in the gradient sync's finish() for those threads (exposed
// data parallelism too).
//
// A pipeline receive blocks until the upstream stage has computed and sent: its time is mostly
// the bubble, not the transfer. Its wait is estimated as the receive's seconds minus its bytes
// at the rate the same step's sends achieved (a send on the local and MPI backends returns once
// its bytes are copied out, so its seconds per byte are the copy's).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/timed_communicator.h"
#include "util/json.h"

namespace mixpar::ch08 {

struct GroupTime {
  std::string name;       // as GroupBytes names it: world, dp, tp, pp, model_parallel, ...
  double busy_s = 0;      // inside the group's calls, on any thread
  double exposed_s = 0;   // the compute thread inside them (dp: also its wait for the others)
  double waiting_s = 0;   // pp: the receives' estimated wait for the upstream stage (bubble)
  std::map<std::string, CommTime> ops;  // by operation ("all_reduce", "send", ...)
};

// The group a clock's name counts under: a split of a group counts as the group ("dp.split",
// ZeRO-3's gather communicator, as dp), and "dp_cp" as dp (as GroupBytes does).
std::string group_of_clock_name(const std::string& clock_name);

// Seconds a pipeline's receives waited for the upstream stage, estimated from the pp group's
// seconds by operation (its "recv" and "sendrecv" wait; its "send" gives the rate) and its
// bytes by operation in the same step; never below 0 nor above the receives' seconds.
double pp_receive_wait(const CommTimes& pp_step, const std::map<std::string, TrafficTotals>& bytes);

// The step's groups, in the clock's order of names after folding: `step` the clock's change
// over the step, `sync_wait_s` the compute thread's wait in finish() outside any call (dp's),
// `pp_bytes` the pp group's traffic by operation during the step (empty without pp).
std::vector<GroupTime> step_group_times(const CommTimes& step, double sync_wait_s,
                                        const std::map<std::string, TrafficTotals>& pp_bytes);

// "tp 3.1 ms, pp 1.2 ms (1.0 waiting), dp 6.7 ms (0.4 exposed)": the groups with any time,
// pp's with its embedding group's, dp's with its exposed part; "" when none.
std::string group_times_text(const std::vector<GroupTime>& groups);
// The JSONL's comm_ms_by_group: {"tp": {"ms": ..., "exposed_ms": ..., "ops": {"all_reduce":
// {"calls": ..., "ms": ..., "exposed_ms": ...}, ...}}, "pp": {..., "waiting_ms": ...}, ...}.
Json group_times_json(const std::vector<GroupTime>& groups);

}  // namespace mixpar::ch08
