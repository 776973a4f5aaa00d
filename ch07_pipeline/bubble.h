// What a unit-cost timeline says about a schedule: the bubble (the idle share of p ranks x the
// makespan) beside its formula, the micro-batches each rank holds at once, a text Gantt chart
// and the JSON the demo prints (docs/REFERENCE.md, Pipeline bubbles).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ch07_pipeline/schedule_simulator.h"
#include "util/json.h"

namespace mixpar::ch07 {

// idle / (p x makespan): 1 - (compute time over all ranks) / (p x makespan).
double bubble_fraction(const Timeline& t);
// The idle time of the most idle rank: makespan - the least compute time of any rank (the
// bubble DeepSeek's DualPipe table states per device).
std::int64_t bubble_time(const Timeline& t);

// The bubble time formulas, in DualPipe's notation with the costs of one chunk (one stage when
// v = 1): F forward, B whole backward (= T_B + T_W, input and weight), W weight gradient,
// F&B an overlapped pair:
//   afab, 1f1b, interleaved  (p - 1)(F + B)
//   zb-h1                    (p - 1)(F + B - 2W)          m >= p, W <= F, W <= B - W
//   zb-v                     (p - 1)(B - W)               m >= 2p - 1, F <= B - W, W <= B - W
//   dualpipev                (p - 1)(F&B + B - 3W)        F = B - W >= W (DualPipe's PP/2 - 1
//                                                         with PP = 2p stages)
// The conditions are where the simulator finds them exact (tested over p, m and costs);
// outside them the formula is not the bubble (e.g. zb-v with F > B - W idles a little more).
std::int64_t bubble_time_formula(ScheduleKind kind, const PipelineLayout& l, const UnitCosts& c);
std::string bubble_time_formula_text(ScheduleKind kind);
bool bubble_time_formula_applies(ScheduleKind kind, const PipelineLayout& l, const UnitCosts& c);

// The formula of the schedule's bubble as a fraction of the step, with unit costs
// T_F = 1, T_B = 2 (B = W = 1 split):
//   afab, 1f1b    (p - 1) / (m + p - 1)
//   interleaved   (p - 1) / (v m + p - 1)
//   zb-h1         (p - 1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W))
//                 = (p - 1) / (3 m + p - 1)
//   zb-v          (p - 1) T_B / (2 m (T_F + T_B + T_W) + (p - 1) T_B) = (p - 1) / (6 m + p - 1)
//   dualpipev     (p - 1)(F&B + B - 3W) / (2 m (F + B) + (p - 1)(F&B + B - 3W))
//                 = (p - 1) / (3 m + p - 1) at F&B = F + B (the pair in sequence, a CPU's)
// (every rank idles alike at these costs, so the fraction is one rank's)
double bubble_formula(ScheduleKind kind, const PipelineLayout& l);
std::string bubble_formula_text(ScheduleKind kind);

// Micro-batch activations each rank holds at once, by rank: one from the start of a forward
// to the end of its backward (of its W when the backward is split). On an interleaved rank
// each counts one chunk's activations (1/v of a stage's).
std::vector<int> peak_activations(const Timeline& t);
// The same peak read from one rank's program, each micro-batch weighted by its chunk
// (chunk_weight[c], e.g. the blocks of the rank's chunk c: an interleaved rank's chunks may hold
// unequal block counts) from its forward to the action that frees it (its backward; its W when
// the backward is split). A rank runs its actions one at a time, so their order alone decides
// the peak: with every weight 1 it is peak_activations of the rank in any play. This is what
// the pre-flight memory bill multiplies by one block's activations (ch08_full_3d/preflight.h).
std::int64_t peak_held(const RankProgram& program, std::span<const std::int64_t> chunk_weight);
// What the papers state for rank r: afab m; 1f1b min(p - r, m); zb-h1 min(p, m) on every
// rank (held until W: 1F1B's first-rank peak); interleaved min(warm-up + 1, m v) chunks;
// zb-v min(2p, m + r + 1, 2m) chunks (2p: 1F1B's first-rank peak, p stages' worth); dualpipev
// 2p + 1 chunks on every rank (DualPipe's table: PP + 1, with PP = 2p stages).
int expected_peak_activations(ScheduleKind kind, const PipelineLayout& l, int rank);

// One row per rank, one character per time unit: F, B (two units), W, '.' idle; under each
// row the micro-batch of every unit (mod 10), and the chunk when v > 1.
std::string gantt(const Timeline& t, const PipelineLayout& l);

// {"schedule", "pp", "micro_batches", "virtual_stages", "bubble_fraction", "formula",
//  "formula_value", "makespan", "peak_activations": [by rank],
//  "ranks": [[{"action", "start", "end"}, ...] by rank]} (compute actions only).
Json timeline_json(const PipelinePlan& plan, const Timeline& t);

}  // namespace mixpar::ch07
