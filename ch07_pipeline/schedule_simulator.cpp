#include "ch07_pipeline/schedule_simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

namespace mixpar::ch07 {
namespace {

// A message on its way: posted by rank `from` at `posted`, the piece'th transfer of its
// sender's current action.
struct InFlight {
  Transfer sent;
  int from = 0;
  std::size_t piece = 0;
  std::int64_t posted = 0;
};

struct RankState {
  std::size_t pc = 0;
  std::int64_t clock = 0;
  bool posted = false;                 // the current transfer action's sends are out
  std::vector<bool> piece_done;        // per transfer of the current action
  std::vector<std::int64_t> piece_at;  // when each finished
};

bool same_message(const Transfer& sent, const Transfer& wanted) {
  return sent.what == wanted.what && sent.micro_batch == wanted.micro_batch &&
         sent.from_stage == wanted.from_stage;
}

}  // namespace

std::int64_t UnitCosts::of(Work w) const {
  switch (w) {
    case Work::kForward: return forward;
    case Work::kBackward: return backward;
    case Work::kBackwardInput: return backward_input;
    case Work::kBackwardWeight: return backward_weight;
    case Work::kTransfer: return 0;
  }
  return 0;
}

PlayResult play(const PipelinePlan& plan, SendMode mode, const UnitCosts& costs) {
  const int p = static_cast<int>(plan.ranks.size());
  const PipelineLayout& l = plan.layout;
  PlayResult res;
  res.timeline.ranks.resize(static_cast<std::size_t>(p));
  std::vector<RankState> st(static_cast<std::size_t>(p));
  std::map<std::pair<int, int>, std::deque<InFlight>> channel;  // (from, to) in send order
  auto action_of = [&](int r) -> const Action& { return plan.ranks[std::size_t(r)][st[std::size_t(r)].pc]; };
  auto finished = [&](int r) { return st[std::size_t(r)].pc >= plan.ranks[std::size_t(r)].size(); };
  auto fail = [&](std::string what, int a, int b) {
    res.ok = false;
    res.problem.what = std::move(what);
    res.problem.rank_a = a;
    res.problem.rank_b = b;
    res.problem.action_a = a >= 0 && !finished(a) ? describe(action_of(a), l) : "(finished)";
    res.problem.action_b = b >= 0 && !finished(b) ? describe(action_of(b), l) : "(finished)";
    return res;
  };
  auto quoted = [&](int r) {
    return finished(r) ? std::string("nothing (its list is done)")
                       : "'" + describe(action_of(r), l) + "'";
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      RankState& s = st[std::size_t(r)];
      while (!finished(r)) {
        const Action& a = action_of(r);
        if (a.work != Work::kTransfer) {
          const std::int64_t end = s.clock + costs.of(a.work);
          res.timeline.ranks[std::size_t(r)].push_back({a, s.clock, end});
          s.clock = end;
          ++s.pc;
          progress = true;
          continue;
        }
        if (!s.posted) {
          s.posted = true;
          s.piece_done.assign(a.transfers.size(), false);
          s.piece_at.assign(a.transfers.size(), s.clock);
          for (std::size_t k = 0; k < a.transfers.size(); ++k) {
            const Transfer& t = a.transfers[k];
            if (!t.send) continue;
            if (t.peer < 0 || t.peer >= p || t.peer == r) {
              return fail("rank " + std::to_string(r) + " sends to rank " +
                              std::to_string(t.peer) + ", which is no other rank of the pipeline",
                          r, -1);
            }
            channel[{r, t.peer}].push_back({t, r, k, s.clock});
            if (mode == SendMode::kEager) s.piece_done[k] = true;
          }
          progress = true;
        }
        for (std::size_t k = 0; k < a.transfers.size(); ++k) {
          const Transfer& t = a.transfers[k];
          if (t.send || s.piece_done[k]) continue;
          auto& q = channel[{t.peer, r}];
          if (q.empty()) continue;
          const InFlight& head = q.front();
          if (!same_message(head.sent, t)) {
            return fail("mismatch: rank " + std::to_string(t.peer) + " sends '" +
                            describe(Action{Work::kTransfer, -1, 0, {head.sent}}, l) +
                            "' but rank " + std::to_string(r) + " receives in " + quoted(r),
                        t.peer, r);
          }
          const std::int64_t at = std::max(s.clock, head.posted);
          s.piece_done[k] = true;
          s.piece_at[k] = at;
          if (mode == SendMode::kRendezvous) {
            RankState& sender = st[std::size_t(head.from)];
            sender.piece_done[head.piece] = true;
            sender.piece_at[head.piece] = at;
          }
          q.pop_front();
          progress = true;
        }
        if (std::find(s.piece_done.begin(), s.piece_done.end(), false) != s.piece_done.end()) {
          break;  // waits for a peer
        }
        const std::int64_t end = *std::max_element(s.piece_at.begin(), s.piece_at.end());
        res.timeline.ranks[std::size_t(r)].push_back({a, s.clock, end});
        s.clock = std::max(s.clock, end);
        s.posted = false;
        ++s.pc;
        progress = true;
      }
    }
  }

  // Stuck: follow who waits for whom from the lowest waiting rank until a rank repeats.
  auto waits_for = [&](int r) {
    const Action& a = action_of(r);
    const RankState& s = st[std::size_t(r)];
    for (std::size_t k = 0; k < a.transfers.size(); ++k) {
      if (!s.piece_done[k]) return a.transfers[k].peer;
    }
    return -1;
  };
  for (int r = 0; r < p; ++r) {
    if (finished(r)) continue;
    std::vector<int> path{r};
    for (;;) {
      const int q = waits_for(path.back());
      if (finished(q)) {
        return fail("deadlock: rank " + std::to_string(path.back()) + " waits in " +
                        quoted(path.back()) + " for rank " + std::to_string(q) +
                        ", which has finished its list",
                    path.back(), q);
      }
      const auto seen = std::find(path.begin(), path.end(), q);
      if (seen != path.end()) {
        const int a = *seen, b = waits_for(a);
        return fail("deadlock: rank " + std::to_string(a) + " waits in " + quoted(a) +
                        " for rank " + std::to_string(b) + ", which waits in " + quoted(b) +
                        " for rank " + std::to_string(waits_for(b)),
                    a, b);
      }
      path.push_back(q);
    }
  }
  for (const auto& [ends, q] : channel) {
    if (!q.empty()) {
      return fail("rank " + std::to_string(ends.first) + " sends '" +
                      describe(Action{Work::kTransfer, -1, 0, {q.front().sent}}, l) +
                      "' that rank " + std::to_string(ends.second) + " never receives",
                  ends.first, ends.second);
    }
  }
  res.ok = true;
  for (const auto& rank : res.timeline.ranks) {
    for (const TimedAction& t : rank) {
      if (t.action.work != Work::kTransfer) res.timeline.makespan = std::max(res.timeline.makespan, t.end);
    }
  }
  return res;
}

void preflight(const PipelinePlan& plan, SendMode mode) {
  PlayResult r = play(plan, SendMode::kEager);
  if (!r.ok) throw ScheduleRefused(std::move(r.problem));
  if (mode == SendMode::kEager) return;
  r = play(plan, SendMode::kRendezvous);
  if (!r.ok) {
    r.problem.what = std::string(schedule_name(plan.kind)) + " needs buffered sends, and this "
                     "backend's sends wait for their receiver (NCCL, local synchronous): " +
                     r.problem.what;
    throw ScheduleRefused(std::move(r.problem));
  }
}

SendMode send_mode_of(const Communicator& comm) {
  return comm.sends_wait_for_receiver() ? SendMode::kRendezvous : SendMode::kEager;
}

bool survives_rendezvous_sends(const PipelinePlan& plan) {
  return play(plan, SendMode::kRendezvous).ok;
}

}  // namespace mixpar::ch07
