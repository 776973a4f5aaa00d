#include "ch07_pipeline/pipeline_demo_flags.h"

#include <cstdint>

#include "ch07_pipeline/pipeline_lesson.h"
#include "ch07_pipeline/schedule_simulator.h"
#include "util/cli.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

ArgParser make_parser() {
  ArgParser a("ch07_pipeline",
              "Pipeline parallelism: schedules as lists of actions, a pre-flight play that\n"
              "refuses deadlocks, and bubbles measured against the formulas.");
  a.option("schedule", "",
           "afab | 1f1b | interleaved | zb-h1 | zb-v | dualpipev: print this schedule's "
           "timeline only")
      .option("pp", "4", "pipeline stages p")
      .option("micro-batches", "8", "micro-batches m per step")
      .option("virtual-stages", "1",
              "model chunks v per rank (interleaved: >= 2; zb-v, dualpipev: 2, the default "
              "there)")
      .flag("json", "with --schedule: the timeline as JSON")
      .option("bug", "all",
              "all | none | deadlock | loss-not-divided | tied-not-summed | few-micro-batches | "
              "too-many-stages | v-placement | w-after-step");
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

}  // namespace

PipelineDemoFlags parse_pipeline_demo_flags(int argc, char** argv) {
  ArgParser a = make_parser();
  a.parse(argc, argv);
  PipelineDemoFlags f;
  f.pp = bounded(a, "pp", 2, 64);
  f.micro_batches = bounded(a, "micro-batches", 1, 256);
  f.virtual_stages = bounded(a, "virtual-stages", 1, 16);
  std::vector<std::string> bugs{"all", "none"};
  for (const std::string& b : bug_names()) bugs.push_back(b);
  f.bug = a.get_choice("bug", bugs);
  f.json = a.get_flag("json");
  if (a.given("schedule")) {
    const ScheduleKind kind = parse_schedule(a.get("schedule"));
    // The V's two chunks per rank unless told otherwise (then refused with the reason).
    if (placement_of(kind) == Placement::kV && !a.given("virtual-stages")) f.virtual_stages = 2;
    // InputError when the layout cannot run; ScheduleRefused when its play deadlocks.
    f.plan = make_plan(kind, PipelineLayout{f.pp, f.micro_batches, f.virtual_stages});
    preflight(*f.plan);
  } else if (f.json) {
    throw InputError("--json needs --schedule NAME");
  }
  return f;
}

}  // namespace mixpar::ch07
