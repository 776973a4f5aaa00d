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

namespace {

// One play of a plan. Each rank runs down its action list in turn, as far as it can: compute
// takes its cost in time; a transfer posts its sends, then takes the messages it waits for
// from its peers' channels, and ends when every piece is done (eager sends are done once
// posted, rendezvous sends when their receiver takes them). When no rank can move, either
// every list is done or someone waits forever, and the play names who and for what.
class Player {
 public:
  Player(const PipelinePlan& plan, SendMode mode, const UnitCosts& costs)
      : plan_(plan), mode_(mode), costs_(costs), p_(static_cast<int>(plan.ranks.size())),
        st_(static_cast<std::size_t>(p_)) {
    res_.result.timeline.ranks.resize(static_cast<std::size_t>(p_));
  }

  PlayResult run() {
    for (bool progress = true; progress && !res_.problem_found;) {
      progress = false;
      for (int r = 0; r < p_ && !res_.problem_found; ++r) progress |= advance(r);
    }
    if (!res_.problem_found) find_deadlock();
    if (!res_.problem_found) find_unreceived_sends();
    if (res_.problem_found) return std::move(res_.result);
    res_.result.ok = true;
    for (const auto& rank : res_.result.timeline.ranks) {
      for (const TimedAction& t : rank) {
        if (t.action.work != Work::kTransfer) {
          res_.result.timeline.makespan = std::max(res_.result.timeline.makespan, t.end);
        }
      }
    }
    return std::move(res_.result);
  }

 private:
  const Action& action_of(int r) const { return plan_.ranks[std::size_t(r)][st_[std::size_t(r)].pc]; }
  bool finished(int r) const { return st_[std::size_t(r)].pc >= plan_.ranks[std::size_t(r)].size(); }
  std::string quoted(int r) const {
    return finished(r) ? std::string("nothing (its list is done)")
                       : "'" + describe(action_of(r), plan_.layout) + "'";
  }
  std::string message(const Transfer& t) const {
    return "'" + describe(Action{Work::kTransfer, -1, 0, {t}}, plan_.layout) + "'";
  }
  void fail(std::string what, int a, int b) {
    PlayProblem& q = res_.result.problem;
    res_.problem_found = true;
    res_.result.ok = false;
    q.what = std::move(what);
    q.rank_a = a;
    q.rank_b = b;
    q.action_a = a >= 0 && !finished(a) ? describe(action_of(a), plan_.layout) : "(finished)";
    q.action_b = b >= 0 && !finished(b) ? describe(action_of(b), plan_.layout) : "(finished)";
  }
  void record(int r, const Action& a, std::int64_t begin, std::int64_t end) {
    res_.result.timeline.ranks[std::size_t(r)].push_back({a, begin, end});
  }

  // Rank r runs until it waits for a peer or its list is done; true when it moved.
  bool advance(int r) {
    RankState& s = st_[std::size_t(r)];
    bool moved = false;
    while (!finished(r) && !res_.problem_found) {
      const Action& a = action_of(r);
      if (a.work != Work::kTransfer) {
        const std::int64_t end = s.clock + costs_.of(a.work);
        record(r, a, s.clock, end);
        s.clock = end;
        ++s.pc;
        moved = true;
        continue;
      }
      if (!s.posted) moved |= post_sends(r, a);
      moved |= take_messages(r, a);
      if (res_.problem_found) break;
      if (std::find(s.piece_done.begin(), s.piece_done.end(), false) != s.piece_done.end()) {
        break;  // waits for a peer
      }
      const std::int64_t end = *std::max_element(s.piece_at.begin(), s.piece_at.end());
      record(r, a, s.clock, end);
      s.clock = std::max(s.clock, end);
      s.posted = false;
      ++s.pc;
      moved = true;
    }
    return moved;
  }

  // The transfer's sends go into their channels, in order; eager ones are done at once.
  bool post_sends(int r, const Action& a) {
    RankState& s = st_[std::size_t(r)];
    s.posted = true;
    s.piece_done.assign(a.transfers.size(), false);
    s.piece_at.assign(a.transfers.size(), s.clock);
    for (std::size_t k = 0; k < a.transfers.size(); ++k) {
      const Transfer& t = a.transfers[k];
      if (!t.send) continue;
      if (t.peer < 0 || t.peer >= p_ || t.peer == r) {
        fail("rank " + std::to_string(r) + " sends to rank " + std::to_string(t.peer) +
                 ", which is no other rank of the pipeline",
             r, -1);
        return true;
      }
      channel_[{r, t.peer}].push_back({t, r, k, s.clock});
      if (mode_ == SendMode::kEager) s.piece_done[k] = true;
    }
    return true;
  }

  // Each receive takes the first message of its peer's channel, which must be the one it
  // expects; under rendezvous the sender's piece ends when it is taken.
  bool take_messages(int r, const Action& a) {
    RankState& s = st_[std::size_t(r)];
    bool moved = false;
    for (std::size_t k = 0; k < a.transfers.size(); ++k) {
      const Transfer& t = a.transfers[k];
      if (t.send || s.piece_done[k]) continue;
      auto& q = channel_[{t.peer, r}];
      if (q.empty()) continue;
      const InFlight& head = q.front();
      if (!same_message(head.sent, t)) {
        fail("mismatch: rank " + std::to_string(t.peer) + " sends " + message(head.sent) +
                 " but rank " + std::to_string(r) + " receives in " + quoted(r),
             t.peer, r);
        return moved;
      }
      const std::int64_t at = std::max(s.clock, head.posted);
      s.piece_done[k] = true;
      s.piece_at[k] = at;
      if (mode_ == SendMode::kRendezvous) {
        RankState& sender = st_[std::size_t(head.from)];
        sender.piece_done[head.piece] = true;
        sender.piece_at[head.piece] = at;
      }
      q.pop_front();
      moved = true;
    }
    return moved;
  }

  // Stuck: follow who waits for whom from the lowest waiting rank until a rank repeats.
  int waits_for(int r) const {
    const Action& a = action_of(r);
    const RankState& s = st_[std::size_t(r)];
    for (std::size_t k = 0; k < a.transfers.size(); ++k) {
      if (!s.piece_done[k]) return a.transfers[k].peer;
    }
    return -1;
  }
  void find_deadlock() {
    for (int r = 0; r < p_; ++r) {
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
  }

  // Every list done, yet a message was never taken.
  void find_unreceived_sends() {
    for (const auto& [ends, q] : channel_) {
      if (!q.empty()) {
        return fail("rank " + std::to_string(ends.first) + " sends " + message(q.front().sent) +
                        " that rank " + std::to_string(ends.second) + " never receives",
                    ends.first, ends.second);
      }
    }
  }

  struct Outcome {
    PlayResult result;
    bool problem_found = false;
  };

  const PipelinePlan& plan_;
  SendMode mode_;
  const UnitCosts& costs_;
  int p_;
  std::vector<RankState> st_;
  std::map<std::pair<int, int>, std::deque<InFlight>> channel_;  // (from, to) in send order
  Outcome res_;
};

}  // namespace

PlayResult play(const PipelinePlan& plan, SendMode mode, const UnitCosts& costs) {
  return Player(plan, mode, costs).run();
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
