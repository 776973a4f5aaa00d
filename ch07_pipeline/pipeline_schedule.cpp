#include "ch07_pipeline/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "report/format.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

using mixpar::num;  // common/report/format.h: integers printed exactly

Action compute(Work w, int mb, int chunk) { return Action{w, mb, chunk, {}}; }

std::vector<RankProgram> afab(const PipelineLayout& l) {
  std::vector<RankProgram> out(static_cast<std::size_t>(l.pp));
  for (auto& prog : out) {
    for (int k = 0; k < l.micro_batches; ++k) prog.push_back(compute(Work::kForward, k, 0));
    for (int k = 0; k < l.micro_batches; ++k) prog.push_back(compute(Work::kBackward, k, 0));
  }
  return out;
}

// Warm-up forwards, then forward k + warmup and backward k in turn, then the remaining
// backwards: the 1F1B skeleton shared by the plain and the interleaved schedule, with the
// chunk and micro-batch of the k-th forward and backward given by fwd(k) and bwd(k).
template <class Fwd, class Bwd>
RankProgram one_f_one_b(int total, int warmup, Fwd fwd, Bwd bwd) {
  RankProgram prog;
  for (int k = 0; k < warmup; ++k) prog.push_back(fwd(k));
  for (int k = 0; k < total - warmup; ++k) {
    prog.push_back(fwd(k + warmup));
    prog.push_back(bwd(k));
  }
  for (int k = total - warmup; k < total; ++k) prog.push_back(bwd(k));
  return prog;
}

// ZB-H1 (Qi et al. 2023, section 2.1): 1F1B's pattern with the backward split and the start of
// the W passes delayed by the rank's missing warm-up forwards. Rank r runs min(p - r, m)
// forwards, then for each micro-batch j: B_j; a W (the oldest pending one) once more than r
// are pending, or when no forward is left; the next F. So every rank holds min(p, m)
// micro-batches at most (its in-flight B's plus its delayed W's: 1F1B's first-rank peak),
// B's reach the first rank after T_B instead of T_B + T_W per stage, and the delayed W's fill
// the cool-down that 1F1B leaves idle.
std::vector<RankProgram> zb_h1(const PipelineLayout& l) {
  const int p = l.pp, m = l.micro_batches;
  std::vector<RankProgram> out;
  for (int r = 0; r < p; ++r) {
    RankProgram prog;
    int next_f = std::min(p - r, m);
    for (int k = 0; k < next_f; ++k) prog.push_back(compute(Work::kForward, k, 0));
    std::deque<int> pending_w;
    for (int j = 0; j < m; ++j) {
      prog.push_back(compute(Work::kBackwardInput, j, 0));
      pending_w.push_back(j);
      if (static_cast<int>(pending_w.size()) > r || next_f >= m) {
        prog.push_back(compute(Work::kBackwardWeight, pending_w.front(), 0));
        pending_w.pop_front();
      }
      if (next_f < m) prog.push_back(compute(Work::kForward, next_f++, 0));
    }
    for (int j : pending_w) prog.push_back(compute(Work::kBackwardWeight, j, 0));
    out.push_back(std::move(prog));
  }
  return out;
}

}  // namespace

std::string_view schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kAfab: return "afab";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZbH1: return "zb-h1";
  }
  return "?";
}

std::vector<std::string> schedule_names() { return {"afab", "1f1b", "interleaved", "zb-h1"}; }

ScheduleKind parse_schedule(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                         ScheduleKind::kZbH1}) {
    if (schedule_name(k) == name) return k;
  }
  throw InputError("--schedule: '" + name + "' is not one of afab|1f1b|interleaved|zb-h1");
}

void check_layout(ScheduleKind kind, const PipelineLayout& l) {
  if (l.pp < 1 || l.micro_batches < 1 || l.virtual_stages < 1) {
    throw InputError("pipeline: pp " + num(l.pp) + ", micro-batches " + num(l.micro_batches) +
                     ", virtual stages " + num(l.virtual_stages) + ": each must be >= 1");
  }
  if (kind != ScheduleKind::kInterleaved && l.virtual_stages != 1) {
    throw InputError("pipeline: --virtual-stages " + num(l.virtual_stages) + " needs " +
                     "--schedule interleaved (" + std::string(schedule_name(kind)) +
                     " runs one chunk per rank)");
  }
  if (kind == ScheduleKind::kInterleaved) {
    if (l.pp < 2 || l.virtual_stages < 2) {
      throw InputError("pipeline: interleaved needs pp >= 2 and --virtual-stages >= 2, got pp " +
                       num(l.pp) + " and " + num(l.virtual_stages) + " virtual stages");
    }
    if (l.micro_batches % l.pp != 0) {
      throw InputError("pipeline: interleaved (Megatron's original form) needs the micro-batches "
                       "to be a multiple of pp: " + num(l.micro_batches) + " micro-batches, pp " +
                       num(l.pp));
    }
  }
}

int warmup_forwards(ScheduleKind kind, const PipelineLayout& l, int rank) {
  const int p = l.pp, m = l.micro_batches, v = l.virtual_stages;
  switch (kind) {
    case ScheduleKind::kAfab: return m;
    case ScheduleKind::kOneFOneB: return std::min(p - rank - 1, m);
    case ScheduleKind::kInterleaved:
      // megatron/core/pipeline_parallel/schedules.py: all of them when m = p.
      return m == p ? m * v : std::min(2 * (p - rank - 1) + (v - 1) * p, m * v);
    case ScheduleKind::kZbH1: {
      const std::vector<RankProgram> order = compute_order(kind, l);
      int n = 0;
      for (const Action& a : order[std::size_t(rank)]) {
        if (a.work != Work::kForward) break;
        ++n;
      }
      return n;
    }
  }
  return 0;
}

std::vector<RankProgram> compute_order(ScheduleKind kind, const PipelineLayout& l) {
  check_layout(kind, l);
  const int p = l.pp, m = l.micro_batches, v = l.virtual_stages;
  switch (kind) {
    case ScheduleKind::kAfab: return afab(l);
    case ScheduleKind::kZbH1: return zb_h1(l);
    case ScheduleKind::kOneFOneB: {
      std::vector<RankProgram> out;
      for (int r = 0; r < p; ++r) {
        out.push_back(one_f_one_b(
            m, warmup_forwards(kind, l, r),
            [](int k) { return compute(Work::kForward, k, 0); },
            [](int k) { return compute(Work::kBackward, k, 0); }));
      }
      return out;
    }
    case ScheduleKind::kInterleaved: {
      std::vector<RankProgram> out;
      const auto mb = [p, v](int k) { return (k / (p * v)) * p + k % p; };
      for (int r = 0; r < p; ++r) {
        out.push_back(one_f_one_b(
            m * v, warmup_forwards(kind, l, r),
            [&](int k) { return compute(Work::kForward, mb(k), (k / p) % v); },
            [&](int k) { return compute(Work::kBackward, mb(k), v - 1 - (k / p) % v); }));
      }
      return out;
    }
  }
  return {};
}

std::vector<RankProgram> with_transfers(const std::vector<RankProgram>& compute_lists,
                                        const PipelineLayout& l) {
  const int last = l.stages() - 1;
  std::vector<RankProgram> out;
  for (std::size_t r = 0; r < compute_lists.size(); ++r) {
    RankProgram prog;
    auto transfer = [&](bool send, int peer_stage, Payload what, int mb, int from_stage) {
      const Transfer t{send, l.rank_of(peer_stage), what, mb, from_stage};
      // A receive right after a send: post both at once (a sendrecv).
      if (!send && !prog.empty() && prog.back().work == Work::kTransfer &&
          prog.back().transfers.size() == 1 && prog.back().transfers[0].send) {
        prog.back().transfers.push_back(t);
      } else {
        prog.push_back(Action{Work::kTransfer, -1, 0, {t}});
      }
    };
    for (const Action& a : compute_lists[r]) {
      const int s = l.stage_of(static_cast<int>(r), a.chunk);
      const bool fwd = a.work == Work::kForward;
      const bool bwd = a.work == Work::kBackward || a.work == Work::kBackwardInput;
      if (fwd && s > 0) transfer(false, s - 1, Payload::kActivation, a.micro_batch, s - 1);
      if (bwd && s < last) transfer(false, s + 1, Payload::kGradient, a.micro_batch, s + 1);
      prog.push_back(a);
      if (fwd && s < last) transfer(true, s + 1, Payload::kActivation, a.micro_batch, s);
      if (bwd && s > 0) transfer(true, s - 1, Payload::kGradient, a.micro_batch, s);
    }
    out.push_back(std::move(prog));
  }
  return out;
}

PipelinePlan make_plan(ScheduleKind kind, const PipelineLayout& layout) {
  PipelinePlan plan;
  plan.kind = kind;
  plan.layout = layout;
  plan.ranks = with_transfers(compute_order(kind, layout), layout);
  return plan;
}

std::string describe(const Action& a, const PipelineLayout& l) {
  auto chunk = [&](int c) { return l.virtual_stages > 1 ? " c" + num(c) : std::string(); };
  switch (a.work) {
    case Work::kForward: return "F mb" + num(a.micro_batch) + chunk(a.chunk);
    case Work::kBackward: return "B mb" + num(a.micro_batch) + chunk(a.chunk);
    case Work::kBackwardInput: return "B(input) mb" + num(a.micro_batch) + chunk(a.chunk);
    case Work::kBackwardWeight: return "W mb" + num(a.micro_batch) + chunk(a.chunk);
    case Work::kTransfer: break;
  }
  std::string s;
  for (const Transfer& t : a.transfers) {
    if (!s.empty()) s += " + ";
    s += std::string(t.send ? "send " : "recv ") +
         (t.what == Payload::kActivation ? "act" : "grad") + " mb" + num(t.micro_batch) +
         (l.virtual_stages > 1 ? " of stage " + num(t.from_stage) : std::string()) +
         (t.send ? " to r" : " from r") + num(t.peer);
  }
  return s;
}

}  // namespace mixpar::ch07
