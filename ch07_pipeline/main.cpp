// ch07_pipeline: pipeline schedules as data. Without --schedule: the four schedules side by
// side, the bubble against m beside the formulas, GPT-2 stages run by the runtime against one
// device, the bubble of real runs, and the failure modes (--bug shows one of them alone).
// With --schedule NAME --pp P --micro-batches M [--virtual-stages V]: that schedule's unit-cost
// timeline as a Gantt chart, or as JSON with --json. Every claim is checked: a failed claim
// exits with 1, a bad flag or a layout that cannot run with 2.
#include <cstdio>
#include <string>
#include <vector>

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/pipeline_lesson.h"
#include "report/claim_table.h"
#include "util/cli.h"
#include "util/errors.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch07;

ArgParser make_parser() {
  ArgParser a("ch07_pipeline",
              "Pipeline parallelism: schedules as lists of actions, a pre-flight play that\n"
              "refuses deadlocks, and bubbles measured against the formulas.");
  a.option("schedule", "", "afab | 1f1b | interleaved | zb-h1: print this schedule's timeline only")
      .option("pp", "4", "pipeline stages p")
      .option("micro-batches", "8", "micro-batches m per step")
      .option("virtual-stages", "1", "model chunks v per rank (interleaved: >= 2)")
      .flag("json", "with --schedule: the timeline as JSON")
      .option("bug", "all",
              "all | none | deadlock | loss-not-divided | tied-not-summed | few-micro-batches | "
              "too-many-stages");
  return a;
}

int bounded(const ArgParser& a, const char* name, int lo, int hi) {
  const std::int64_t v = a.get_int(name);
  if (v < lo || v > hi) {
    throw InputError(std::string("--") + name + " " + std::to_string(v) + " is outside [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(v);
}

void print(const Section& s, ClaimTable& checks) {
  std::printf("\n== %s\n%s", s.title.c_str(), s.text.c_str());
  checks.add(s.claims);
}

int body(int argc, char** argv) {
  ArgParser a = make_parser();
  a.parse(argc, argv);
  const int p = bounded(a, "pp", 2, 64), m = bounded(a, "micro-batches", 1, 256);
  const int v = bounded(a, "virtual-stages", 1, 16);
  const std::string bug = a.get_choice(
      "bug", {"all", "none", "deadlock", "loss-not-divided", "tied-not-summed",
              "few-micro-batches", "too-many-stages"});
  ClaimTable checks;
  if (a.given("schedule")) {
    const ScheduleKind kind = parse_schedule(a.get("schedule"));
    const PipelineLayout l{p, m, v};
    const PipelinePlan plan = make_plan(kind, l);  // InputError when the layout cannot run
    preflight(plan);
    if (a.get_flag("json")) {
      std::printf("%s\n", timeline_json(plan, play(plan, SendMode::kEager).timeline).dump(2).c_str());
      return 0;
    }
    std::printf("%s\n", preflight_summary(plan).c_str());
    print(schedule_section(kind, l), checks);
    return checks.print() == 0 ? 0 : 1;
  }
  if (a.get_flag("json")) throw InputError("--json needs --schedule NAME");
  if (bug == "all" || bug == "none") {
    print(schedules_side_by_side(p, m), checks);
    for (ScheduleKind k : {ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                           ScheduleKind::kZbH1}) {
      const PipelineLayout l{p, m, k == ScheduleKind::kInterleaved ? 2 : 1};
      if (k == ScheduleKind::kInterleaved && (m % p != 0 || p < 2)) continue;
      print(schedule_section(k, l), checks);
    }
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
