// ch07_pipeline: pipeline schedules as data. Without --schedule: the four classic schedules
// side by side, each one's Gantt chart (ZB-V's and DualPipeV's V too), the six schedules'
// table (bubble, activations, parameters, sends: simulated beside their formulas), DualPipeV's
// overlapped pair on a CPU and a GPU, the bubble against m beside the formulas, GPT-2 stages run by the runtime against one
// device, the bubble of real runs, and the failure modes (--bug shows one of them alone).
// With --schedule NAME --pp P --micro-batches M [--virtual-stages V]: that schedule's unit-cost
// timeline as a Gantt chart, or as JSON with --json. Every claim is checked: a failed claim
// exits with 1, a bad flag or a layout that cannot run with 2.
#include <cstdio>
#include <string>
#include <vector>

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/pipeline_demo_flags.h"
#include "ch07_pipeline/pipeline_lesson.h"
#include "report/claim_table.h"
#include "util/errors.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch07;

void print(const Section& s, ClaimTable& checks) {
  std::printf("\n== %s\n%s", s.title.c_str(), s.text.c_str());
  checks.add(s.claims);
}

int body(int argc, char** argv) {
  const PipelineDemoFlags f = parse_pipeline_demo_flags(argc, argv);
  const int p = f.pp, m = f.micro_batches;
  const std::string& bug = f.bug;
  ClaimTable checks(bug);
  if (f.plan) {
    const PipelinePlan& plan = *f.plan;
    if (f.json) {
      std::printf("%s\n", timeline_json(plan, play(plan, SendMode::kEager).timeline).dump(2).c_str());
      return 0;
    }
    std::printf("%s\n", preflight_summary(plan).c_str());
    print(schedule_section(plan.kind, plan.layout), checks);
    return checks.print() == 0 ? 0 : 1;
  }
  if (bug == "all" || bug == "none") {
    print(schedules_side_by_side(p, m), checks);
    for (ScheduleKind k : {ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                           ScheduleKind::kZbH1, ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
      const bool chunks = k == ScheduleKind::kInterleaved || placement_of(k) == Placement::kV;
      const PipelineLayout l{p, m, chunks ? 2 : 1};
      if (k == ScheduleKind::kInterleaved && (m % p != 0 || p < 2)) continue;
      if (k == ScheduleKind::kDualPipeV && m < 2 * p) continue;
      print(schedule_section(k, l), checks);
    }
    print(six_schedules(p, m), checks);
    print(dualpipev_overlap(2), checks);
    print(bubble_sweep(p), checks);
    print(gpt_runs_equal_one_device(), checks);
    print(measured_bubble(2, 8), checks);
  }
  for (const std::string& name : bug_names()) {
    if (bug == "all" || bug == name) print(bug_section(name), checks);
  }
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, body); }
