#include "ch07_pipeline/bubble.h"

#include <algorithm>
#include <map>
#include <string>

#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

bool is_compute(const TimedAction& a) { return a.action.work != Work::kTransfer; }

char glyph(Work w) {
  switch (w) {
    case Work::kForward: return 'F';
    case Work::kBackward:
    case Work::kBackwardInput: return 'B';
    case Work::kBackwardWeight: return 'W';
    case Work::kOverlapForwardBackward: return 'X';
    case Work::kTransfer: break;
  }
  return '?';
}

// The (micro-batch, chunk) whose activations the action frees when it ends: a whole backward,
// a W, or the backward half of an overlapped pair (B of a split backward keeps them for its W).
bool frees(const Action& a, std::pair<int, int>* which) {
  switch (a.work) {
    case Work::kBackward:
    case Work::kBackwardWeight: *which = {a.micro_batch, a.chunk}; return true;
    case Work::kOverlapForwardBackward: *which = {a.bwd_micro_batch, a.bwd_chunk}; return true;
    default: return false;
  }
}
bool holds(const Action& a) {
  return a.work == Work::kForward || a.work == Work::kOverlapForwardBackward;
}

}  // namespace

double bubble_fraction(const Timeline& t) {
  if (t.makespan == 0 || t.ranks.empty()) return 0.0;
  std::int64_t busy = 0;
  for (const auto& rank : t.ranks) {
    for (const TimedAction& a : rank) {
      if (is_compute(a)) busy += a.end - a.start;
    }
  }
  const double capacity = double(t.makespan) * double(t.ranks.size());
  return (capacity - double(busy)) / capacity;
}

double bubble_formula(ScheduleKind kind, const PipelineLayout& l) {
  const double p = l.pp, m = l.micro_batches, v = l.virtual_stages;
  switch (kind) {
    case ScheduleKind::kAfab:
    case ScheduleKind::kOneFOneB: return (p - 1) / (m + p - 1);
    case ScheduleKind::kInterleaved: return (p - 1) / (v * m + p - 1);
    case ScheduleKind::kZbH1: return (p - 1) / (3 * m + p - 1);
    case ScheduleKind::kZbV: return (p - 1) / (6 * m + p - 1);
    case ScheduleKind::kDualPipeV: return (p - 1) / (3 * m + p - 1);
  }
  return 0.0;
}

std::string bubble_formula_text(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kAfab:
    case ScheduleKind::kOneFOneB: return "(p-1)/(m+p-1)";
    case ScheduleKind::kInterleaved: return "(p-1)/(v*m+p-1)";
    case ScheduleKind::kZbH1: return "(p-1)(T_F+T_B-T_W)/(m(T_F+T_B+T_W)+(p-1)(T_F+T_B-T_W))";
    case ScheduleKind::kZbV: return "(p-1)T_B/(2m(T_F+T_B+T_W)+(p-1)T_B)";
    case ScheduleKind::kDualPipeV: return "(p-1)(F&B+B-3W)/(2m(F+B)+(p-1)(F&B+B-3W))";
  }
  return "";
}

std::int64_t bubble_time(const Timeline& t) {
  std::int64_t least = t.makespan;
  for (const auto& rank : t.ranks) {
    std::int64_t busy = 0;
    for (const TimedAction& a : rank) {
      if (is_compute(a)) busy += a.end - a.start;
    }
    least = std::min(least, busy);
  }
  return t.makespan - least;
}

std::int64_t bubble_time_formula(ScheduleKind kind, const PipelineLayout& l, const UnitCosts& c) {
  const std::int64_t p = l.pp, F = c.forward, W = c.backward_weight;
  const std::int64_t B = c.backward_input + c.backward_weight;  // DualPipe's B: the whole backward
  switch (kind) {
    case ScheduleKind::kAfab:
    case ScheduleKind::kOneFOneB:
    case ScheduleKind::kInterleaved: return (p - 1) * (F + c.backward);
    case ScheduleKind::kZbH1: return (p - 1) * (F + B - 2 * W);
    case ScheduleKind::kZbV: return (p - 1) * (B - W);
    case ScheduleKind::kDualPipeV: return (p - 1) * (c.overlapped + B - 3 * W);
  }
  return 0;
}

std::string bubble_time_formula_text(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kAfab:
    case ScheduleKind::kOneFOneB:
    case ScheduleKind::kInterleaved: return "(p-1)(F+B)";
    case ScheduleKind::kZbH1: return "(p-1)(F+B-2W)";
    case ScheduleKind::kZbV: return "(p-1)(B-W)";
    case ScheduleKind::kDualPipeV: return "(p-1)(F&B+B-3W)";
  }
  return "";
}

bool bubble_time_formula_applies(ScheduleKind kind, const PipelineLayout& l, const UnitCosts& c) {
  const std::int64_t F = c.forward, Bi = c.backward_input, W = c.backward_weight;
  switch (kind) {
    case ScheduleKind::kAfab:
    case ScheduleKind::kOneFOneB:
    case ScheduleKind::kInterleaved: return true;
    case ScheduleKind::kZbH1: return l.micro_batches >= l.pp && W <= F && W <= Bi;
    case ScheduleKind::kZbV: return l.micro_batches >= 2 * l.pp - 1 && F <= Bi && W <= Bi;
    case ScheduleKind::kDualPipeV: return F == Bi && W <= Bi;
  }
  return false;
}

std::vector<int> peak_activations(const Timeline& t) {
  std::vector<int> out;
  for (const auto& rank : t.ranks) {
    // +1 at a forward's start, -1 at the end of the action that frees it.
    std::vector<std::pair<std::int64_t, int>> events;
    for (const TimedAction& a : rank) {
      std::pair<int, int> which;
      if (holds(a.action)) events.push_back({a.start, +1});
      if (frees(a.action, &which)) events.push_back({a.end, -1});
    }
    // At equal times the release comes first: a buffer freed at t is free for a start at t.
    std::sort(events.begin(), events.end());
    int held = 0, peak = 0;
    for (const auto& [at, d] : events) {
      held += d;
      peak = std::max(peak, held);
    }
    out.push_back(peak);
  }
  return out;
}

std::int64_t peak_held(const RankProgram& program, std::span<const std::int64_t> chunk_weight) {
  auto weight = [&](int chunk) {
    const auto c = static_cast<std::size_t>(chunk);
    if (c >= chunk_weight.size()) {
      throw InputError("peak_held: chunk " + std::to_string(chunk) + " of an action but " +
                       std::to_string(chunk_weight.size()) + " chunk weights");
    }
    return chunk_weight[c];
  };
  std::int64_t held = 0, peak = 0;
  for (const Action& a : program) {
    // A forward's buffers are live from its start; a freeing action releases at its end, so
    // the next forward can reuse them (peak_activations: the release first at equal times).
    // An overlapped pair holds its forward's and its backward's at once.
    std::pair<int, int> which;
    if (holds(a)) {
      held += weight(a.chunk);
      peak = std::max(peak, held);
    }
    if (frees(a, &which)) held -= weight(which.second);
  }
  return peak;
}

int expected_peak_activations(ScheduleKind kind, const PipelineLayout& l, int rank) {
  const int m = l.micro_batches, p = l.pp;
  switch (kind) {
    case ScheduleKind::kAfab: return m;
    case ScheduleKind::kOneFOneB: return std::min(p - rank, m);
    // Qi et al.: every rank holds as many as 1F1B's first rank (its B's in flight plus the
    // W's it delays), so the peak over the ranks is 1F1B's.
    case ScheduleKind::kZbH1: return std::min(p, m);
    case ScheduleKind::kZbV: return std::min({2 * p, m + rank + 1, 2 * m});
    case ScheduleKind::kDualPipeV: return 2 * p + 1;
    case ScheduleKind::kInterleaved:
      return std::min(warmup_forwards(kind, l, rank) + 1, m * l.virtual_stages);
  }
  return 0;
}

std::string gantt(const Timeline& t, const PipelineLayout& l) {
  const auto width = static_cast<std::size_t>(t.makespan);
  std::string out;
  for (std::size_t r = 0; r < t.ranks.size(); ++r) {
    std::string work(width, '.'), mb(width, ' '), chunk(width, ' ');
    for (const TimedAction& a : t.ranks[r]) {
      if (!is_compute(a)) continue;
      for (std::int64_t u = a.start; u < a.end; ++u) {
        work[std::size_t(u)] = glyph(a.action.work);
        mb[std::size_t(u)] = char('0' + a.action.micro_batch % 10);
        chunk[std::size_t(u)] = char('0' + a.action.chunk % 10);
      }
    }
    const std::string label = "rank " + std::to_string(r);
    out += "  " + label + "  |" + work + "|\n";
    out += "  " + std::string(label.size(), ' ') + "  |" + mb + "| micro-batch\n";
    if (l.virtual_stages > 1) {
      out += "  " + std::string(label.size(), ' ') + "  |" + chunk + "| chunk\n";
    }
  }
  return out;
}

Json timeline_json(const PipelinePlan& plan, const Timeline& t) {
  Json j = Json::object();
  const PipelineLayout& l = plan.layout;
  j.set("schedule", std::string(schedule_name(plan.kind)));
  j.set("pp", l.pp);
  j.set("micro_batches", l.micro_batches);
  j.set("virtual_stages", l.virtual_stages);
  j.set("bubble_fraction", bubble_fraction(t));
  j.set("formula", bubble_formula_text(plan.kind));
  j.set("formula_value", bubble_formula(plan.kind, l));
  j.set("makespan", t.makespan);
  Json peaks = Json::array();
  for (int v : peak_activations(t)) peaks.push_back(v);
  j.set("peak_activations", std::move(peaks));
  Json ranks = Json::array();
  for (const auto& rank : t.ranks) {
    Json acts = Json::array();
    for (const TimedAction& a : rank) {
      if (!is_compute(a)) continue;
      Json e = Json::object();
      e.set("action", describe(a.action, l));
      e.set("start", a.start);
      e.set("end", a.end);
      acts.push_back(std::move(e));
    }
    ranks.push_back(std::move(acts));
  }
  j.set("ranks", std::move(ranks));
  return j;
}

}  // namespace mixpar::ch07
