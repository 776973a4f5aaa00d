#include "ch07_pipeline/schedule_simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>
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
    case Work::kOverlapForwardBackward: return overlapped;
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
    if (!res_.problem_found) find_missing_gradients();
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
    Action a;
    a.work = Work::kTransfer;
    a.transfers = {t};
    return "'" + describe(a, plan_.layout) + "'";
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
        if (!local_inputs_ready(r, a)) break;
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

  // A compute action fed by a stage on this rank needs that stage's output already made: the
  // rank runs one action at a time, so a list with the consumer first can never run.
  bool local_inputs_ready(int r, const Action& a) {
    const PipelineLayout& l = plan_.layout;
    const bool pair = a.work == Work::kOverlapForwardBackward;
    const int last = l.stages() - 1;
    auto check = [&](bool needed, int stage, int mb, Payload what, const std::string& feeder) {
      if (!needed || l.rank_of(stage) != r) return true;
      if (made_.contains({stage, mb, what})) return true;
      fail("rank " + std::to_string(r) + " runs " + quoted(r) + " before " + feeder +
               " that feeds it on the same rank (stages " + std::to_string(stage) +
               " and its neighbour share rank " + std::to_string(r) + ")",
           r, r);
      return false;
    };
    const int s = l.stage_of(r, a.chunk);
    const int sb = pair ? l.stage_of(r, a.bwd_chunk) : s;
    const int mb_b = pair ? a.bwd_micro_batch : a.micro_batch;
    const bool fwd = a.work == Work::kForward || pair;
    const bool bwd = a.work == Work::kBackward || a.work == Work::kBackwardInput || pair;
    if (!check(fwd && s > 0, s - 1, a.micro_batch, Payload::kActivation,
               "the forward of stage " + std::to_string(s - 1))) {
      return false;
    }
    if (!check(bwd && sb < last, sb + 1, mb_b, Payload::kGradient,
               "the backward of stage " + std::to_string(sb + 1))) {
      return false;
    }
    if (fwd) made_.insert({s, a.micro_batch, Payload::kActivation});
    if (bwd) made_.insert({sb, mb_b, Payload::kGradient});
    return true;
  }

  // Every (micro-batch, chunk) run forward has its input and weight gradients on its rank.
  void find_missing_gradients() {
    for (int r = 0; r < p_; ++r) {
      std::map<std::pair<int, int>, int> fwd, input, weight;
      for (const Action& a : plan_.ranks[std::size_t(r)]) {
        switch (a.work) {
          case Work::kForward: ++fwd[{a.micro_batch, a.chunk}]; break;
          case Work::kBackward:
            ++input[{a.micro_batch, a.chunk}];
            ++weight[{a.micro_batch, a.chunk}];
            break;
          case Work::kBackwardInput: ++input[{a.micro_batch, a.chunk}]; break;
          case Work::kBackwardWeight: ++weight[{a.micro_batch, a.chunk}]; break;
          case Work::kOverlapForwardBackward:
            ++fwd[{a.micro_batch, a.chunk}];
            ++input[{a.bwd_micro_batch, a.bwd_chunk}];
            ++weight[{a.bwd_micro_batch, a.bwd_chunk}];
            break;
          case Work::kTransfer: break;
        }
      }
      for (const auto& [key, n] : fwd) {
        const bool has_input = input[key] == n, has_weight = weight[key] == n;
        if (has_input && has_weight) continue;
        return fail("rank " + std::to_string(r) + " runs micro-batch " +
                        std::to_string(key.first) + " of chunk " + std::to_string(key.second) +
                        " forward but not its " + (has_input ? "weight" : "input") +
                        " gradient within the step (a W deferred past the optimizer step "
                        "misses it)",
                    r, r);
      }
    }
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
      channel_[{r, t.peer, message_tag(t.what, plan_.layout)}].push_back({t, r, k, s.clock});
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
      auto& q = channel_[{t.peer, r, message_tag(t.what, plan_.layout)}];
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
        const auto& [from, to, what] = ends;
        return fail("rank " + std::to_string(from) + " sends " + message(q.front().sent) +
                        " that rank " + std::to_string(to) + " never receives",
                    from, to);
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
  // (from, to, tag) in send order: the runtime's tags (message_tag), each in order.
  std::map<std::tuple<int, int, int>, std::deque<InFlight>> channel_;
  std::set<std::tuple<int, int, Payload>> made_;  // (stage, micro-batch, what) run so far
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
  if (plan.layout.placement == Placement::kV) {
    PlayProblem q;
    q.what = std::string(schedule_name(plan.kind)) + " sends activations and gradients on "
             "tags of their own (message_tag), and a send-and-receive pair on two tags is two "
             "calls: it needs buffered sends, and this backend's sends wait for their receiver "
             "(NCCL, local synchronous)";
    throw ScheduleRefused(std::move(q));
  }
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
  if (plan.layout.placement == Placement::kV) return false;  // preflight says why
  return play(plan, SendMode::kRendezvous).ok;
}

}  // namespace mixpar::ch07
