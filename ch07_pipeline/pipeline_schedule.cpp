#include "ch07_pipeline/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "report/format.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

using mixpar::num;  // common/report/format.h: integers printed exactly

Action compute(Work w, int mb, int chunk) {
  Action a;
  a.work = w;
  a.micro_batch = mb;
  a.chunk = chunk;
  return a;
}

Action overlapped(int f_mb, int f_chunk, int b_mb, int b_chunk) {
  Action a = compute(Work::kOverlapForwardBackward, f_mb, f_chunk);
  a.bwd_micro_batch = b_mb;
  a.bwd_chunk = b_chunk;
  return a;
}

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

// ZB-V (Qi et al. 2023, section 6), in the order of PyTorch's ScheduleZBVZeroBubble
// (docs/SOURCES.md). Rank r, chunk 0 = stage r, chunk 1 = stage 2p - 1 - r:
//   warm-up   2(p - r) - 1 F0; r x (F1, F0); p - r x (F1, B1, W1)
//   steady    while F1 lags F0 or F0 is not done: F0 (while any is left), B0, W0, F1, B1, W1
//   cool-down r x (B0, B1); p - r x (B0, W0); the W1's left; the W0's left
// The lists are written for max(m, 2p - 1) micro-batches and the ones past m dropped on every
// rank alike (what PyTorch does for a pipeline that does not fill): dropping whole
// micro-batches keeps every dependency of the others.
std::vector<RankProgram> zb_v(const PipelineLayout& l) {
  const int p = l.pp, m = l.micro_batches, n = std::max(m, 2 * p - 1);
  std::vector<RankProgram> out;
  for (int r = 0; r < p; ++r) {
    RankProgram all;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto push = [&](Work w, int mb, int chunk) { all.push_back(compute(w, mb, chunk)); };
    for (int k = 0; k < 2 * (p - r) - 1; ++k) push(Work::kForward, f0++, 0);
    for (int k = 0; k < r; ++k) {
      push(Work::kForward, f1++, 1);
      push(Work::kForward, f0++, 0);
    }
    for (int k = 0; k < p - r; ++k) {
      push(Work::kForward, f1++, 1);
      push(Work::kBackwardInput, b1, 1);
      push(Work::kBackwardWeight, b1++, 1);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) push(Work::kForward, f0++, 0);
      push(Work::kBackwardInput, b0, 0);
      push(Work::kBackwardWeight, b0++, 0);
      push(Work::kForward, f1++, 1);
      push(Work::kBackwardInput, b1, 1);
      push(Work::kBackwardWeight, b1++, 1);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; ++k) {
      push(Work::kBackwardInput, b0++, 0);
      push(Work::kBackwardInput, b1++, 1);
    }
    for (int k = 0; k < p - r; ++k) {
      push(Work::kBackwardInput, b0++, 0);
      push(Work::kBackwardWeight, w0++, 0);
    }
    while (w1 < b1) push(Work::kBackwardWeight, w1++, 1);
    while (w0 < b0) push(Work::kBackwardWeight, w0++, 0);
    RankProgram prog;
    for (const Action& a : all) {
      if (a.micro_batch < m) prog.push_back(a);
    }
    out.push_back(std::move(prog));
  }
  return out;
}

// DualPipeV (DeepSeek's dualpipev.py, docs/SOURCES.md), m >= 2p. Rank r, chunk 0 = stage r,
// chunk 1 = stage 2p - 1 - r; B a whole backward unless split ("zb": B now, its W queued,
// first in first out, and run where the list says W):
//   1  2(p - r - 1) F0
//   2  r + 1 x (F0, F1)
//   3  p - r - 1 x (B1 split, W, F1)
//   4  m - 2p + r + 1 x (F0 & B1, F1 & B0)   (& one overlapped pair; the last rank runs its
//      first F0 and B1 apart: its B1 needs that very F0's output through F1)
//   5  p - r - 1 x (B1, F1 & B0)
//   6  r + 1 x (B1, B0), split from the middle iteration on (odd ranks from that B1, even
//      ranks from that B0)
//   7  p - r - 1 x (W, B0 split)
//   8  r + 1 x W
std::vector<RankProgram> dualpipe_v(const PipelineLayout& l) {
  const int p = l.pp, m = l.micro_batches;
  std::vector<RankProgram> out;
  for (int r = 0; r < p; ++r) {
    RankProgram prog;
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::deque<std::pair<int, int>> w_queue;  // (micro-batch, chunk) of the queued W's
    auto fwd = [&](int c) { prog.push_back(compute(Work::kForward, f[c]++, c)); };
    auto bwd = [&](int c, bool split) {
      if (!split) {
        prog.push_back(compute(Work::kBackward, b[c]++, c));
        return;
      }
      w_queue.push_back({b[c], c});
      prog.push_back(compute(Work::kBackwardInput, b[c]++, c));
    };
    auto weight = [&] {
      prog.push_back(compute(Work::kBackwardWeight, w_queue.front().first, w_queue.front().second));
      w_queue.pop_front();
    };
    auto pair = [&](int fc, int bc) {
      prog.push_back(overlapped(f[fc]++, fc, b[bc]++, bc));
    };
    for (int k = 0; k < 2 * (p - r - 1); ++k) fwd(0);
    for (int k = 0; k < r + 1; ++k) {
      fwd(0);
      fwd(1);
    }
    for (int k = 0; k < p - r - 1; ++k) {
      bwd(1, true);
      weight();
      fwd(1);
    }
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {
      if (k == 0 && r == p - 1) {
        fwd(0);
        bwd(1, false);
      } else {
        pair(0, 1);
      }
      pair(1, 0);
    }
    for (int k = 0; k < p - r - 1; ++k) {
      bwd(1, false);
      pair(1, 0);
    }
    bool split = false;
    for (int k = 0; k < r + 1; ++k) {
      if (k == (r + 1) / 2 && r % 2 == 1) split = true;
      bwd(1, split);
      if (k == (r + 1) / 2 && r % 2 == 0) split = true;
      bwd(0, split);
    }
    for (int k = 0; k < p - r - 1; ++k) {
      weight();
      bwd(0, true);
    }
    while (!w_queue.empty()) weight();
    out.push_back(std::move(prog));
  }
  return out;
}

}  // namespace

std::vector<ScheduleKind> all_schedules() {
  return {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
          ScheduleKind::kZbH1, ScheduleKind::kZbV,      ScheduleKind::kDualPipeV};
}

bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbV || k == ScheduleKind::kDualPipeV;
}

Placement placement_of(ScheduleKind k) {
  return k == ScheduleKind::kZbV || k == ScheduleKind::kDualPipeV ? Placement::kV
                                                                 : Placement::kLoop;
}

PipelineLayout layout_for(ScheduleKind kind, int pp, int micro_batches, int virtual_stages) {
  return PipelineLayout{pp, micro_batches, virtual_stages, placement_of(kind)};
}

std::string_view schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kAfab: return "afab";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZbH1: return "zb-h1";
    case ScheduleKind::kZbV: return "zb-v";
    case ScheduleKind::kDualPipeV: return "dualpipev";
  }
  return "?";
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> out;
  for (ScheduleKind k : all_schedules()) out.emplace_back(schedule_name(k));
  return out;
}

ScheduleKind parse_schedule(const std::string& name) {
  for (ScheduleKind k : all_schedules()) {
    if (schedule_name(k) == name) return k;
  }
  throw InputError("--schedule: '" + name +
                   "' is not one of afab|1f1b|interleaved|zb-h1|zb-v|dualpipev");
}

int message_tag(Payload what, const PipelineLayout& l) {
  constexpr int kPipelineTag = 7;  // every message of the loop placement; the V's activations
  return l.placement == Placement::kV && what == Payload::kGradient ? kPipelineTag + 1
                                                                     : kPipelineTag;
}

void check_layout(ScheduleKind kind, const PipelineLayout& l) {
  if (l.pp < 1 || l.micro_batches < 1 || l.virtual_stages < 1) {
    throw InputError("pipeline: pp " + num(l.pp) + ", micro-batches " + num(l.micro_batches) +
                     ", virtual stages " + num(l.virtual_stages) + ": each must be >= 1");
  }
  const std::string name(schedule_name(kind));
  if (l.placement != placement_of(kind)) {
    throw InputError("pipeline: " + name + " is written for the " +
                     (placement_of(kind) == Placement::kV ? "V" : "loop") +
                     " placement of chunks, the layout places them otherwise");
  }
  if (placement_of(kind) == Placement::kV) {
    if (l.pp < 2 || l.virtual_stages != 2) {
      throw InputError("pipeline: " + name + " needs pp >= 2 and exactly two chunks per rank "
                       "(--virtual-stages 2, the V), got pp " + num(l.pp) + " and " +
                       num(l.virtual_stages) + " virtual stages");
    }
    if (kind == ScheduleKind::kDualPipeV && l.micro_batches < 2 * l.pp) {
      throw InputError("pipeline: dualpipev needs at least 2 x pp micro-batches: " +
                       num(l.micro_batches) + " micro-batches, pp " + num(l.pp));
    }
    return;
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
    case ScheduleKind::kZbH1:
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV: {
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
    case ScheduleKind::kZbV: return zb_v(l);
    case ScheduleKind::kDualPipeV: return dualpipe_v(l);
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
        Action x;
        x.work = Work::kTransfer;
        x.transfers = {t};
        prog.push_back(std::move(x));
      }
    };
    // A neighbour stage on this very rank (the V's stages p - 1 and p) is no transfer: the
    // runtime hands the tensor over in memory.
    const auto remote = [&](int stage) { return l.rank_of(stage) != static_cast<int>(r); };
    for (const Action& a : compute_lists[r]) {
      const bool pair = a.work == Work::kOverlapForwardBackward;
      const int s = l.stage_of(static_cast<int>(r), a.chunk);
      const int sb = pair ? l.stage_of(static_cast<int>(r), a.bwd_chunk) : s;
      const int mb_b = pair ? a.bwd_micro_batch : a.micro_batch;
      const bool fwd = a.work == Work::kForward || pair;
      const bool bwd = a.work == Work::kBackward || a.work == Work::kBackwardInput || pair;
      if (fwd && s > 0 && remote(s - 1)) {
        transfer(false, s - 1, Payload::kActivation, a.micro_batch, s - 1);
      }
      if (bwd && sb < last && remote(sb + 1)) {
        transfer(false, sb + 1, Payload::kGradient, mb_b, sb + 1);
      }
      prog.push_back(a);
      if (fwd && s < last && remote(s + 1)) {
        transfer(true, s + 1, Payload::kActivation, a.micro_batch, s);
      }
      if (bwd && sb > 0 && remote(sb - 1)) transfer(true, sb - 1, Payload::kGradient, mb_b, sb);
    }
    out.push_back(std::move(prog));
  }
  return out;
}

PipelinePlan make_plan(ScheduleKind kind, PipelineLayout layout) {
  layout.placement = placement_of(kind);
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
    case Work::kOverlapForwardBackward:
      return "F mb" + num(a.micro_batch) + chunk(a.chunk) + " & B mb" + num(a.bwd_micro_batch) +
             chunk(a.bwd_chunk);
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
