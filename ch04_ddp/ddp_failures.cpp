// The four failure modes, each run beside its fix and judged by the symptom the lesson names:
// drifting replicas, no gain in samples, ranks diverging after a one-rank overflow, and an
// FP16 reduction that overflows where an FP32 one does not.
#include <cmath>
#include <limits>
#include <set>

#include "ddp_scenarios.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"

namespace mixpar::ch04 {


namespace {

bool replicas_always_agree_all(const std::vector<RankRun>& runs) {
  for (const RankRun& r : runs) {
    for (const StepLog& s : r.steps) {
      if (!s.replicas_agree) return false;
    }
  }
  return true;
}

int count_if_steps(const RankRun& r, bool (*pred)(const StepLog&)) {
  int n = 0;
  for (const StepLog& s : r.steps) n += pred(s) ? 1 : 0;
  return n;
}

}  // namespace

std::vector<std::string> bug_names() {
  return {"different-init", "same-data", "local-scaler", "fp16-reduce"};
}

ScenarioResult bug_scenario(const std::string& name, int ranks, const LessonConfig& base) {
  if (name == "different-init") return different_init_scenario(ranks, base);
  if (name == "same-data") return same_data_scenario(ranks, base);
  if (name == "local-scaler") return local_scaler_scenario(ranks, base);
  if (name == "fp16-reduce") return fp16_reduce_scenario(ranks, base);
  throw InputError("unknown failure mode '" + name +
                   "' (different-init | same-data | local-scaler | fp16-reduce)");
}

ScenarioResult different_init_scenario(int ranks, const LessonConfig& base) {
  LessonConfig bug = base;
  bug.seed_per_rank = true;
  bug.ddp.init = InitSync::kNone;
  bug.ddp.check_at_init = false;
  LessonConfig fix = bug;
  fix.ddp.init = InitSync::kBroadcast;
  const auto b = run_local_ddp(ranks, bug);
  const auto f = run_local_ddp(ranks, fix);
  ScenarioResult r;
  r.name = "different-init";
  r.title = "each rank initialised from its own seed, nothing broadcast";
  r.symptom = "replicas never agree, although the logged (averaged) loss looks normal";
  TextTable t({"step", "global loss (rank 0)", "global loss (rank 1)", "local loss 0",
               "local loss 1", "replicas agree"});
  for (std::size_t i = 0; i < b[0].steps.size(); ++i) {
    t.add({std::to_string(i), fmt("%.6f", b[0].steps[i].loss), fmt("%.6f", b[1].steps[i].loss),
           fmt("%.6f", b[0].steps[i].local_loss), fmt("%.6f", b[1].steps[i].local_loss),
           b[0].steps[i].replicas_agree ? "yes" : "no"});
  }
  r.table = t.str();
  const int agreeing = count_if_steps(b[0], [](const StepLog& s) { return s.replicas_agree; });
  r.claims.push_back(
      {"steps where the replica check passes (bug)", "0", std::to_string(agreeing), agreeing == 0});
  r.claims.push_back(claim_broken_by(
      "different-init", {"different-init run: replicas bit-identical at every step",
                         fmt("%d of %d steps", base.steps, base.steps),
                         fmt("%d of %d steps", agreeing, base.steps), agreeing == base.steps}));
  const double drift = max_rel_diff(b[1].final_weights, b[0].final_weights);
  r.claims.push_back(
      {"max |w_rank1 - w_rank0| after training (bug)", "> 1e-3", fmt("%.3g", drift), drift > 1e-3});
  r.claims.push_back(yes_claim("the logged global loss is the same on every rank (bug)",
                               b[0].steps.back().loss == b[1].steps.back().loss));
  const int fixed = count_if_steps(f[0], [](const StepLog& s) { return s.replicas_agree; });
  r.claims.push_back({"steps where replicas agree with rank 0's broadcast",
                      std::to_string(base.steps), std::to_string(fixed), fixed == base.steps});
  return r;
}

ScenarioResult same_data_scenario(int ranks, const LessonConfig& base) {
  LessonConfig bug = base;
  bug.same_data = true;
  LessonConfig one = base;  // what the bug really trains: one rank's batch
  const auto b = run_local_ddp(ranks, bug);
  const auto good = run_local_ddp(ranks, base);
  const auto single = run_local_ddp(1, one);
  const auto distinct_rows = [](const std::vector<RankRun>& runs) {
    std::set<std::int64_t> rows;
    for (const RankRun& r : runs) rows.insert(r.steps[0].rows.begin(), r.steps[0].rows.end());
    return static_cast<std::int64_t>(rows.size());
  };
  ScenarioResult r;
  r.name = "same-data";
  r.title = "every rank reads rank 0's rows";
  r.symptom = "every rank computes the same gradient: N ranks train like one";
  TextTable t({"step", "local loss rank 0", "local loss rank 1", "global loss"});
  bool same_local = true;
  for (std::size_t i = 0; i < b[0].steps.size(); ++i) {
    for (const RankRun& rr : b)
      same_local = same_local && rr.steps[i].local_loss == b[0].steps[i].local_loss;
    t.add({std::to_string(i), fmt("%.6f", b[0].steps[i].local_loss),
           fmt("%.6f", b[1].steps[i].local_loss), fmt("%.6f", b[0].steps[i].loss)});
  }
  r.table = t.str();
  r.claims.push_back(
      yes_claim("local losses identical on every rank at every step (bug)", same_local));
  r.claims.push_back({"distinct rows per step (bug)", std::to_string(base.B),
                      std::to_string(distinct_rows(b)), distinct_rows(b) == base.B});
  r.claims.push_back({"distinct rows per step (correct)", std::to_string(base.B * ranks),
                      std::to_string(distinct_rows(good)), distinct_rows(good) == base.B * ranks});
  r.claims.push_back(claim_broken_by(
      "same-data", {"same-data run: N x B distinct rows per step", std::to_string(base.B * ranks),
                    std::to_string(distinct_rows(b)), distinct_rows(b) == base.B * ranks}));
  const double d = max_rel_diff(b[0].final_weights, single[0].final_weights);
  r.claims.push_back(tolerance_claim(
      fmt("weights equal ONE rank's with batch %lld (bug)", (long long)base.B), d,
      kWeightsTolerance));
  return r;
}

ScenarioResult local_scaler_scenario(int ranks, const LessonConfig& base) {
  LessonConfig bug = base;
  bug.scaler = ch02::pytorch_config();
  bug.order = ScalerOrder::kUnscaleThenReduce;
  bug.agree_found_inf = false;
  bug.overflow_step = base.steps / 2;
  LessonConfig fix = bug;
  fix.agree_found_inf = true;
  const auto b = run_local_ddp(ranks, bug);
  const auto f = run_local_ddp(ranks, fix);
  const std::size_t k = static_cast<std::size_t>(bug.overflow_step);
  const auto o = static_cast<std::size_t>(bug.overflow_rank);
  ScenarioResult r;
  r.name = "local-scaler";
  r.title = fmt("rank %d overflows at step %zu; each rank decides from its own gradients",
                bug.overflow_rank, k);
  r.symptom = "the overflowing rank skips, the others step on its inf: replicas and scales split";
  TextTable t({"step", "rank 0 taken", fmt("rank %zu taken", o), "scale 0", fmt("scale %zu", o),
               "replicas agree", "fixed: replicas agree"});
  for (std::size_t i = 0; i < b[0].steps.size(); ++i) {
    t.add({std::to_string(i), b[0].steps[i].taken ? "yes" : "no",
           b[o].steps[i].taken ? "yes" : "no", fmt("%g", b[0].steps[i].scale),
           fmt("%g", b[o].steps[i].scale), b[0].steps[i].replicas_agree ? "yes" : "NO",
           f[0].steps[i].replicas_agree ? "yes" : "NO"});
  }
  r.table = t.str();
  r.claims.push_back(yes_claim(fmt("bug: rank %zu skips step %zu while rank 0 takes it", o, k),
                               !b[o].steps[k].taken && b[0].steps[k].taken));
  r.claims.push_back(
      yes_claim("bug: replicas agree before the overflow and differ after it",
                (k == 0 || b[0].steps[k - 1].replicas_agree) && !b[0].steps[k].replicas_agree));
  const bool split =
      k + 1 < b[0].steps.size() && b[0].steps[k + 1].scale != b[o].steps[k + 1].scale;
  r.claims.push_back(yes_claim("bug: the ranks' loss scales differ after the overflow", split));
  const int agreeing = count_if_steps(b[0], [](const StepLog& s) { return s.replicas_agree; });
  const auto steps = static_cast<int>(b[0].steps.size());
  r.claims.push_back(claim_broken_by(
      "local-scaler", {"local-scaler run: replicas bit-identical at every step",
                       fmt("%d of %d steps", steps, steps),
                       fmt("%d of %d steps", agreeing, steps), agreeing == steps}));
  bool fixed_ok = replicas_always_agree_all(f);
  for (const RankRun& rr : f) fixed_ok = fixed_ok && !rr.steps[k].taken;
  r.claims.push_back(
      yes_claim("fixed (found-inf all-reduced): all skip, replicas agree", fixed_ok));
  return r;
}

}  // namespace mixpar::ch04
