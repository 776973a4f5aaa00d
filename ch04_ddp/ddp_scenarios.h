// The chapter's claims as runnable scenarios: N-rank DDP equals one rank with N times the
// batch; gradient accumulation sends nothing until the last micro-step; unscaling before or
// after the all-reduce is the same when the decision is shared; and the four failure modes,
// each judged by its symptom. The demo prints them, the tests assert them.
#pragma once

#include <string>
#include <vector>

#include "ch04_ddp/ddp_lesson.h"
#include "ch04_ddp/ddp_tolerances.h"
#include "report/claim_table.h"

namespace mixpar::ch04 {

struct ScenarioResult {
  std::string name;     // "equivalence", "different-init", ...
  std::string title;    // one line for the demo
  std::string symptom;  // what the lesson says will be seen
  std::string table;    // per-step detail
  std::vector<Claim> claims;
  bool all_ok() const;  // every claim holds but those broken_by the bug, which fail
};

// N ranks x batch B vs one rank x batch N*B, same data, same steps (c.accum micro-steps each).
ScenarioResult equivalence_scenario(int ranks, const LessonConfig& base);
// N ranks x A micro-steps of B vs one rank x batch N*A*B: equal, and one bucket all-reduce
// per bucket per optimizer step, whatever A.
ScenarioResult accumulation_scenario(int ranks, int accum, const LessonConfig& base);
// The order of source article A section 7.1 (docs/SOURCES.md): unscale, then all-reduce;
// against PyTorch's (all-reduce the scaled gradients, then unscale), with one shared scale
// and an agreed decision: same weights.
ScenarioResult unscale_order_scenario(int ranks, const LessonConfig& base);

// Where a step's time goes: compute, communication, and the communication the compute
// thread waited for, per layout (after backward in one bucket; buckets on the communication
// thread; smaller buckets; the hand-built ring), on a model large enough to time. Mean over
// ranks and over steps after the first. trace: every rank's spans of the small-bucket run.
struct TimeSplitRow {
  std::string layout;
  int buckets = 0;
  double compute_ms = 0, comm_ms = 0, exposed_ms = 0;
};
LessonConfig timing_config();  // 4 layers, width 128, T = 64, B = 4 per rank
std::vector<TimeSplitRow> measure_time_split(int ranks, const LessonConfig& c,
                                             std::vector<TraceSpan>* trace);

// The failure modes: "different-init", "same-data", "local-scaler", "fp16-reduce".
std::vector<std::string> bug_names();
ScenarioResult bug_scenario(const std::string& name, int ranks, const LessonConfig& base);
ScenarioResult different_init_scenario(int ranks, const LessonConfig& base);
ScenarioResult same_data_scenario(int ranks, const LessonConfig& base);
ScenarioResult local_scaler_scenario(int ranks, const LessonConfig& base);
ScenarioResult fp16_reduce_scenario(int ranks, const LessonConfig& base);

// What fp16_reduce_scenario measured, for the tests.
struct Fp16ReduceMeasure {
  double scale = 0;              // chosen so each rank's scaled gradients fit but their sum not
  double local_max = 0;          // max |scaled gradient| over ranks, before the reduction
  double sum_max = 0;            // max |sum over ranks|, computed in FP32
  bool fp32_inf = false, fp16_inf = false;      // inf/NaN in the reduced gradients
  bool fp32_taken = false, fp16_taken = false;  // the mixed-precision optimizer's step
};
Fp16ReduceMeasure measure_fp16_reduce(int ranks, const LessonConfig& base);

}  // namespace mixpar::ch04
