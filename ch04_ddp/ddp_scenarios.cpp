// The scenarios where DDP is right: it equals one rank with N times the batch, accumulation
// costs no communication, and the unscale order of source article A section 7.1
// (docs/SOURCES.md) changes nothing when the scale and the decision are shared. Each returns a
// table and its checked claims.
#include "ddp_scenarios.h"

#include <cmath>
#include <limits>

#include "report/format.h"
#include "report/text_table.h"

namespace mixpar::ch04 {


bool ScenarioResult::all_ok() const {
  for (const Claim& c : claims) {
    // A correctness claim measured on the buggy run is as it should be when it fails.
    if (c.ok != c.broken_by.empty()) return false;
  }
  return true;
}

namespace {

double max_loss_diff(const RankRun& a, const RankRun& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.steps.size() && i < b.steps.size(); ++i) {
    const double d = std::abs(a.steps[i].loss - b.steps[i].loss) /
                     std::max(1.0, std::abs(b.steps[i].loss));
    m = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(m, d);
  }
  return m;
}

// Every rank logged the same loss and grad norm and held the same weights after every step.
bool ranks_identical(const std::vector<RankRun>& runs) {
  for (const RankRun& r : runs) {
    for (std::size_t i = 0; i < r.steps.size(); ++i) {
      const StepLog& a = r.steps[i];
      const StepLog& b = runs[0].steps[i];
      const bool same_norm = a.grad_norm == b.grad_norm ||
                             (std::isnan(a.grad_norm) && std::isnan(b.grad_norm));
      if (a.loss != b.loss || !same_norm || a.weights_hash != b.weights_hash) return false;
    }
  }
  return true;
}

bool replicas_always_agree(const std::vector<RankRun>& runs) {
  for (const RankRun& r : runs) {
    for (const StepLog& s : r.steps) {
      if (!s.replicas_agree) return false;
    }
  }
  return true;
}

std::string loss_table(const RankRun& one, const RankRun& many, const std::string& one_name,
                       const std::string& many_name) {
  TextTable t({"step", "loss " + one_name, "loss " + many_name, "grad norm " + one_name,
               "grad norm " + many_name});
  for (std::size_t i = 0; i < one.steps.size(); ++i) {
    t.add({std::to_string(i), fmt("%.7f", one.steps[i].loss), fmt("%.7f", many.steps[i].loss),
           fmt("%.6f", one.steps[i].grad_norm), fmt("%.6f", many.steps[i].grad_norm)});
  }
  return t.str();
}

// Compares N ranks with config `many` against one rank with config `one`.
void add_equivalence_claims(ScenarioResult& r, const std::vector<RankRun>& single,
                            const std::vector<RankRun>& multi) {
  r.claims.push_back(tolerance_claim("losses equal the single rank's, step for step",
                                     max_loss_diff(multi[0], single[0]), kLossTolerance));
  r.claims.push_back(
      tolerance_claim("final weights equal the single rank's",
                      max_rel_diff(multi[0].final_weights, single[0].final_weights),
                      kWeightsTolerance));
  r.claims.push_back(yes_claim("loss, grad norm and weights identical on every rank",
                               ranks_identical(multi)));
  r.claims.push_back(yes_claim("replica check passes after every step",
                               replicas_always_agree(multi)));
}

std::int64_t bucket_all_reduces(const RankRun& r) {
  std::int64_t n = 0;
  for (const TraceSpan& s : r.spans) n += s.name.rfind("all_reduce bucket", 0) == 0 ? 1 : 0;
  return n;
}

}  // namespace

ScenarioResult equivalence_scenario(int ranks, const LessonConfig& base) {
  LessonConfig one = base;
  one.B = base.B * ranks;
  const auto single = run_local_ddp(1, one);
  const auto multi = run_local_ddp(ranks, base);
  ScenarioResult r;
  r.name = "equivalence";
  r.title = fmt("%d ranks x batch %lld == 1 rank x batch %lld (FP32, %d steps)", ranks,
                (long long)base.B, (long long)one.B, base.steps);
  r.symptom = "the same losses and weights up to FP32 reordering";
  r.table = loss_table(single[0], multi[0], "1 rank", fmt("%d ranks", ranks));
  add_equivalence_claims(r, single, multi);
  return r;
}

ScenarioResult accumulation_scenario(int ranks, int accum, const LessonConfig& base) {
  LessonConfig many = base;
  many.accum = accum;
  LessonConfig one = base;
  one.B = base.B * ranks * accum;
  const auto single = run_local_ddp(1, one);
  const auto multi = run_local_ddp(ranks, many);
  ScenarioResult r;
  r.name = "accumulation";
  r.title = fmt("%d ranks x %d micro-steps of batch %lld == 1 rank x batch %lld", ranks, accum,
                (long long)base.B, (long long)one.B);
  r.symptom = "one all-reduce per bucket per optimizer step, none on the other micro-steps";
  r.table = loss_table(single[0], multi[0], "1 rank", fmt("%d ranks", ranks));
  add_equivalence_claims(r, single, multi);
  const std::int64_t want = std::int64_t(base.steps) * multi[0].buckets;
  const std::int64_t got = bucket_all_reduces(multi[0]);
  r.claims.push_back({"bucket all-reduces on rank 0 (steps x buckets)", std::to_string(want),
                      std::to_string(got), got == want});
  return r;
}

ScenarioResult unscale_order_scenario(int ranks, const LessonConfig& base) {
  LessonConfig after = base;
  after.scaler = ch02::pytorch_config();
  after.overflow_step = base.steps / 2;
  LessonConfig before = after;
  before.order = ScalerOrder::kUnscaleThenReduce;
  const auto a = run_local_ddp(ranks, after);
  const auto b = run_local_ddp(ranks, before);
  ScenarioResult r;
  r.name = "unscale-order";
  r.title = "article A 7.1: unscale before the all-reduce vs after (one scale, agreed found-inf)";
  r.symptom = "no difference: scaling by a power of two commutes with the sum";
  TextTable t(
      {"step", "scale", "taken (reduce, unscale)", "taken (unscale, reduce)", "same weights"});
  bool same = true, all_skip = true;
  const std::size_t k = static_cast<std::size_t>(after.overflow_step);
  for (std::size_t i = 0; i < a[0].steps.size(); ++i) {
    const bool eq = a[0].steps[i].weights_hash == b[0].steps[i].weights_hash;
    same = same && eq;
    t.add({std::to_string(i), fmt("%g", a[0].steps[i].scale), a[0].steps[i].taken ? "yes" : "no",
           b[0].steps[i].taken ? "yes" : "no", eq ? "yes" : "NO"});
  }
  for (const auto* runs : {&a, &b}) {
    for (const RankRun& rr : *runs) all_skip = all_skip && !rr.steps[k].taken;
  }
  r.table = t.str();
  r.claims.push_back(yes_claim("both orders give bit-identical weights at every step", same));
  r.claims.push_back(
      yes_claim(fmt("every rank skips step %zu (rank %d overflowed)", k, after.overflow_rank),
                all_skip));
  r.claims.push_back(yes_claim("replicas agree in both orders",
                               replicas_always_agree(a) && replicas_always_agree(b)));
  return r;
}

LessonConfig timing_config() {
  LessonConfig c;
  c.model = {.n_layer = 4, .n_head = 4, .n_embd = 128, .n_positions = 64, .vocab_size = 256};
  c.B = 4;
  c.T = 64;
  c.steps = 4;
  c.check_replicas_each_step = false;
  return c;
}

namespace {

TimeSplitRow time_split(const std::string& layout, int ranks, const LessonConfig& c,
                        std::vector<TraceSpan>* trace) {
  const auto runs = run_local_ddp(ranks, c);
  TimeSplitRow row{layout, runs[0].buckets, 0, 0, 0};
  int n = 0;
  for (const RankRun& r : runs) {
    for (std::size_t i = r.steps.size() > 1 ? 1 : 0; i < r.steps.size(); ++i, ++n) {
      row.compute_ms += 1e3 * r.steps[i].times.compute_s;
      row.comm_ms += 1e3 * r.steps[i].times.comm_s;
      row.exposed_ms += 1e3 * r.steps[i].times.exposed_s;
    }
    if (trace) trace->insert(trace->end(), r.spans.begin(), r.spans.end());
  }
  row.compute_ms /= n;
  row.comm_ms /= n;
  row.exposed_ms /= n;
  return row;
}

}  // namespace

std::vector<TimeSplitRow> measure_time_split(int ranks, const LessonConfig& c,
                                             std::vector<TraceSpan>* trace) {
  std::vector<TimeSplitRow> rows;
  LessonConfig v = c;
  v.ddp.reducer.overlap = false;
  rows.push_back(time_split("after backward, on the compute thread", ranks, v, nullptr));
  v.ddp.reducer.overlap = true;
  rows.push_back(time_split("communication thread, 25 MiB buckets", ranks, v, nullptr));
  v.ddp.reducer.bucket_cap_bytes = 128 << 10;
  rows.push_back(time_split("communication thread, 128 KiB buckets", ranks, v, trace));
  v.ddp.reducer.algo = AllReduceAlgo::kRing;
  rows.push_back(time_split("same, hand-built ring", ranks, v, nullptr));
  return rows;
}

}  // namespace mixpar::ch04
