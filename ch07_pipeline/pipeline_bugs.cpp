// Chapter 7's failure modes (--bug ...): the broken plans and the sections that run them, each
// with the claims it checks against one device or the pre-flight play.
#include "ch07_pipeline/pipeline_lesson.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "ch07_pipeline/bubble.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"

namespace mixpar::ch07 {

PipelinePlan v_lists_in_a_loop(ScheduleKind kind, int p, int m) {
  PipelinePlan plan = make_plan(kind, {p, m, 2});
  PipelineLayout loop = plan.layout;
  loop.placement = Placement::kLoop;
  plan.layout = loop;
  plan.ranks = with_transfers(compute_order(kind, layout_for(kind, p, m, 2)), loop);
  return plan;
}

PipelinePlan last_w_deferred(PipelinePlan plan) {
  for (RankProgram& prog : plan.ranks) {
    const auto last = std::find_if(prog.rbegin(), prog.rend(), [](const Action& a) {
      return a.work == Work::kBackwardWeight;
    });
    if (last != prog.rend()) prog.erase(std::next(last).base());
  }
  return plan;
}

PipelinePlan receive_before_send(PipelinePlan plan) {
  for (RankProgram& prog : plan.ranks) {
    RankProgram out;
    for (const Action& a : prog) {
      if (a.work == Work::kTransfer && a.transfers.size() == 2) {
        for (const Transfer& t : {a.transfers[1], a.transfers[0]}) {
          out.push_back(Action{Work::kTransfer, -1, 0, {t}});
        }
      } else {
        out.push_back(a);
      }
    }
    prog = std::move(out);
  }
  return plan;
}

std::vector<std::string> bug_names() {
  return {"deadlock",        "loss-not-divided", "tied-not-summed", "few-micro-batches",
          "too-many-stages", "v-placement",      "w-after-step"};
}

namespace {

// 1F1B with each send-and-receive split, receive first: refused by the pre-flight play before
// any compute, and, run unchecked, reported by the communicator as a deadlock.
Section deadlock_section(const GptConfig& c) {
  Section s;
  s.title = "--bug deadlock: 1F1B with every send-and-receive split, receive first";
  const PipelinePlan bad = receive_before_send(make_plan(ScheduleKind::kOneFOneB, {2, 4, 1}));
  std::string refused;
  try {
    preflight(bad);
  } catch (const ScheduleRefused& e) {
    refused = e.what();
  }
  std::string report;
  GptPipelineOptions o;
  o.preflight = false;
  try {
    run_gpt_pipeline(c, bad, lesson_batches(c, 4), o);
  } catch (const CommError& e) {
    report = e.what();
  }
  s.text = "  pre-flight (before any compute):\n    " + refused +
           "\n  the same lists run unchecked, as the communicator reports them:\n    " +
           report.substr(0, report.find('\n', 400)) + "\n";
  s.claims.push_back(yes_claim("the pre-flight check refuses it, naming ranks 0 and 1",
                               refused.find("rank 0") != std::string::npos &&
                                   refused.find("rank 1") != std::string::npos));
  s.claims.push_back(yes_claim("run unchecked, the communicator reports a deadlock",
                               report.find("deadlock") != std::string::npos));
  s.claims.push_back(claim_broken_by(
      "deadlock", {"deadlock run: every send meets its receive (the pre-flight play passes)",
                   "passes", refused.empty() ? "passes" : "refused", refused.empty()}));
  return s;
}

// The last stage seeds each backward with 1, not 1/m: the norm is m times too large.
Section loss_not_divided_section(const GptConfig& c) {
  Section s;
  s.title = "--bug loss-not-divided: the last stage seeds each backward with 1, not 1/m";
  TextTable t({"m", "norm (correct)", "norm (bug)", "ratio", "clip 1.5 x correct fires"});
  bool ok = true;
  double worst_ratio = 1;
  for (int m : {2, 4, 8}) {
    const auto bs = lesson_batches(c, m);
    const PipelinePlan plan = make_plan(ScheduleKind::kOneFOneB, {2, m, 1});
    GptPipelineOptions bug;
    bug.divide_loss_by_m = false;
    const double good = run_gpt_pipeline(c, plan, bs).grad_norm;
    const double bad = run_gpt_pipeline(c, plan, bs, bug).grad_norm;
    const double clip = 1.5 * good;
    ok = ok && std::abs(bad / good - m) < 1e-4 * m && bad > clip;
    if (std::abs(bad / good - 1) > std::abs(worst_ratio - 1)) worst_ratio = bad / good;
    t.add({num(m), fmt("%.5f", good), fmt("%.5f", bad), fmt("%.4f", bad / good),
           bad > clip ? "yes (every step)" : "no"});
  }
  s.text = t.str();
  s.claims.push_back(yes_claim("without the division the gradients are m times too large "
                               "and clipping fires", ok));
  s.claims.push_back(claim_broken_by(
      "loss-not-divided",
      {"loss-not-divided run: the norm is the correct pipeline's (to 1e-6), m 2, 4, 8",
       "1.000000 x", fmt("%.6f x", worst_ratio), std::abs(worst_ratio - 1) <= 1e-6}));
  return s;
}

// The tied wte's two copies step on their own halves of the gradient and drift apart.
Section tied_not_summed_section(const GptConfig& c) {
  Section s;
  s.title = "--bug tied-not-summed: the two wte copies step on their own halves of the gradient";
  GptPipelineOptions good, bug;
  good.sgd_steps = bug.sgd_steps = 3;
  good.lr = bug.lr = 0.1f;
  bug.sum_tied_embedding = false;
  const auto bs = lesson_batches(c, 4);
  const PipelinePlan plan = make_plan(ScheduleKind::kOneFOneB, {4, 4, 1});
  const GptPipelineRun a = run_gpt_pipeline(c, plan, bs, good);
  const GptPipelineRun b = run_gpt_pipeline(c, plan, bs, bug);
  TextTable t({"run", "wte hash, first stage", "wte hash, last stage", "equal"});
  t.add({"summed over the embedding group", fmt("%016llx", (unsigned long long)a.wte_hash_first),
         fmt("%016llx", (unsigned long long)a.wte_hash_last),
         a.wte_hash_first == a.wte_hash_last ? "yes" : "no"});
  t.add({"not summed (bug)", fmt("%016llx", (unsigned long long)b.wte_hash_first),
         fmt("%016llx", (unsigned long long)b.wte_hash_last),
         b.wte_hash_first == b.wte_hash_last ? "yes" : "no"});
  s.text = t.str() + "  (3 SGD steps, lr 0.1, p 4, m 4)\n";
  s.claims.push_back(yes_claim("summed: the copies stay bit-identical", a.wte_hash_first == a.wte_hash_last));
  s.claims.push_back(yes_claim("not summed: the hash shows the copies drifted",
                               b.wte_hash_first != b.wte_hash_last));
  s.claims.push_back(claim_broken_by(
      "tied-not-summed", yes_claim("tied-not-summed run: the copies stay bit-identical",
                                   b.wte_hash_first == b.wte_hash_last)));
  return s;
}

// m < p runs, with one device's loss; the pre-flight summary states the bubble.
Section few_micro_batches_section(const GptConfig& c) {
  Section s;
  s.title = "--bug few-micro-batches: m = 2 < p = 4 runs, and the pre-flight summary says the cost";
  const PipelinePlan plan = make_plan(ScheduleKind::kOneFOneB, {4, 2, 1});
  const auto bs = lesson_batches(c, 2);
  const GptPipelineRun run = run_gpt_pipeline(c, plan, bs);
  const OneDevice ref = one_device(c, bs);
  const std::string summary = preflight_summary(plan);
  s.text = "  " + summary + "\n";
  s.claims.push_back(yes_claim("it runs, with one device's loss", run.loss_sum == ref.loss_sum));
  s.claims.push_back(yes_claim("the summary states the bubble (60%)",
                               summary.find("60%") != std::string::npos));
  // Correct, but not efficient: the claim it breaks is the one m >= p buys, a bubble
  // (p - 1) / (m + p - 1) below half.
  const double bubble = bubble_formula(ScheduleKind::kOneFOneB, plan.layout);
  s.claims.push_back(claim_broken_by(
      "few-micro-batches", {"few-micro-batches run: the bubble (p-1)/(m+p-1) is below half",
                            "< 50%", fmt("%.0f%%", 100 * bubble), bubble < 0.5}));
  return s;
}

// More stages than blocks: an input error naming both.
Section too_many_stages_section(const GptConfig& c) {
  Section s;
  s.title = "--bug too-many-stages: more stages than blocks, or chunks without a block each";
  auto error_of = [&](int p, int v) {
    try {
      for (int st = 0; st < p * v; ++st) gpt_stage(c, st, p * v);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string many = error_of(16, 1), chunks = error_of(4, 4);
  s.text = "  p 16 on 8 blocks:        " + many + "\n  p 4 x v 4 on 8 blocks:   " + chunks +
           "\n  (uneven splits run: 8 blocks on p 3 give " + num(gpt_stage(c, 0, 3).blocks(c)) +
           " " + num(gpt_stage(c, 1, 3).blocks(c)) + " " + num(gpt_stage(c, 2, 3).blocks(c)) +
           " blocks, the first stages one more)\n";
  s.claims.push_back(yes_claim("16 stages of 8 blocks: an input error naming both",
                               many.find("16 stages for 8 blocks") != std::string::npos));
  s.claims.push_back(yes_claim("4 x 4 chunks of 8 blocks: an input error naming both",
                               chunks.find("16 stages for 8 blocks") != std::string::npos));
  s.claims.push_back(claim_broken_by(
      "too-many-stages", {"too-many-stages run: p 16 on 8 blocks builds its stages", "built",
                          many == "accepted" ? "built" : "refused", many == "accepted"}));
  return s;
}

// ZB-V's lists (written for the V: rank r holds stages r and 2p - 1 - r) placed as a loop
// (rank r holding r and p + r): the stages the lists' data flows between are no longer the
// neighbours they name, and the pre-flight play refuses the plan before any compute.
Section v_placement_section() {
  Section s;
  s.title = "--bug v-placement: ZB-V's lists with the loop's placement (chunk 1 of rank r on "
            "stage p + r, not 2p - 1 - r)";
  std::string refused;
  try {
    preflight(v_lists_in_a_loop(ScheduleKind::kZbV, 4, 8));
  } catch (const ScheduleRefused& e) {
    refused = e.what();
  }
  std::string ok_v;
  try {
    preflight(make_plan(ScheduleKind::kZbV, {4, 8, 2}));
    ok_v = "accepted";
  } catch (const ScheduleRefused& e) {
    ok_v = e.what();
  }
  s.text = "  the V (p 4, m 8):  " + ok_v + "\n  placed as a loop:  " + refused + "\n";
  s.claims.push_back(yes_claim("placed as the V, the pre-flight play accepts ZB-V's lists",
                               ok_v == "accepted"));
  s.claims.push_back(yes_claim("placed as a loop, the pre-flight play refuses them naming two ranks",
                               refused.find("rank") != std::string::npos));
  s.claims.push_back(claim_broken_by(
      "v-placement", {"v-placement run: every send meets its receive (the pre-flight play passes)",
                      "passes", refused.empty() ? "passes" : "refused", refused.empty()}));
  return s;
}

// Each rank's last W left for after the optimizer step: the pre-flight play finds the weight
// gradient missing from the step; run unchecked, the gradients are not one device's.
Section w_after_step_section(const GptConfig& c) {
  Section s;
  s.title = "--bug w-after-step: each rank's last W of ZB-V deferred past the optimizer step";
  const int p = 2, m = 4;
  const PipelinePlan bad = last_w_deferred(make_plan(ScheduleKind::kZbV, {p, m, 2}));
  std::string refused;
  try {
    preflight(bad);
  } catch (const ScheduleRefused& e) {
    refused = e.what();
  }
  GptPipelineOptions o;
  o.preflight = false;
  const auto bs = lesson_batches(c, m);
  const OneDevice ref = one_device(c, bs);
  const GptPipelineRun run = run_gpt_pipeline(c, bad, bs, o);
  int bitwise = 0, total = 0;
  for (const auto& [name, g] : ref.grads) {
    if (name == "wte.weight") continue;
    ++total;
    bitwise += bitwise_equal(run.grads.at(name), g) ? 1 : 0;
  }
  s.text = "  pre-flight (before any compute):\n    " + refused +
           fmt("\n  run unchecked (p %d, m %d): %d of %d gradients (wte aside) are one device's\n",
               p, m, bitwise, total);
  s.claims.push_back(yes_claim("the pre-flight check refuses it, naming the missing W",
                               refused.find("weight gradient") != std::string::npos));
  s.claims.push_back(claim_broken_by(
      "w-after-step", {"w-after-step run: every gradient but wte is one device's bit for bit",
                       fmt("%d / %d", total, total), fmt("%d / %d", bitwise, total),
                       bitwise == total}));
  return s;
}

}  // namespace

Section bug_section(const std::string& name) {
  const GptConfig c = small_gpt();
  if (name == "deadlock") return deadlock_section(c);
  if (name == "loss-not-divided") return loss_not_divided_section(c);
  if (name == "tied-not-summed") return tied_not_summed_section(c);
  if (name == "few-micro-batches") return few_micro_batches_section(c);
  if (name == "too-many-stages") return too_many_stages_section(c);
  if (name == "v-placement") return v_placement_section();
  if (name == "w-after-step") return w_after_step_section(c);
  throw InputError("--bug: '" + name + "' is not one of all|none|deadlock|loss-not-divided|"
                   "tied-not-summed|few-micro-batches|too-many-stages|v-placement|w-after-step");
}

}  // namespace mixpar::ch07
