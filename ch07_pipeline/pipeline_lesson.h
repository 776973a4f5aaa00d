// The lesson of chapter 7, as functions the demo prints and the tests call: the schedules'
// timelines at unit cost, GPT-2 stages run by the runtime against one device, and the failure
// modes (--bug ...), each with the claims it checks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ch07_pipeline/pipeline_runtime.h"
#include "ch07_pipeline/schedule_simulator.h"
#include "comm/local_backend.h"
#include "report/claim_table.h"

namespace mixpar::ch07 {

// What a section prints and the claims it checks.
struct Section {
  std::string title, text;
  std::vector<Claim> claims;
};

// m micro-batches of B x T tokens, seeded.
std::vector<TokenBatch> lesson_batches(const GptConfig& c, int m, std::int64_t B = 2,
                                       std::int64_t T = 8, std::uint64_t seed = 11);

// One device accumulating the micro-batches (seed 1/m each): the reference of every claim.
struct OneDevice {
  double loss_sum = 0;
  double grad_norm = 0;  // global L2 norm of the accumulated gradients
  std::map<std::string, std::vector<float>> grads;
};
OneDevice one_device(const GptConfig& c, const std::vector<TokenBatch>& batches);

struct GptPipelineOptions {
  bool divide_loss_by_m = true;    // --bug loss-not-divided: false
  bool sum_tied_embedding = true;  // --bug tied-not-summed: false
  bool preflight = true;           // --bug deadlock runs the plan unchecked
  int sgd_steps = 1;               // steps of p -= lr g after each step's gradients
  float lr = 0.0f;                 // 0: gradients only, weights untouched
  LocalOptions local;
};

struct GptPipelineRun {
  double loss_sum = 0;  // the last stage's, of the last step
  double grad_norm = 0;  // sqrt of the sum over the ranks of their counted squares
  double first_stage_norm = 0;  // the norm rank 0 alone would compute (the bug of a norm
                                // that misses the other stages)
  std::map<std::string, std::vector<float>> grads;  // every parameter once (wte: rank 0's)
  std::vector<std::size_t> peak_activation_bytes;   // by rank, from the ledger
  std::vector<std::size_t> pp_bytes_sent;           // by rank, the last step's
  std::uint64_t wte_hash_first = 0, wte_hash_last = 0;  // the tied copies after the steps
  std::vector<double> compute_s;                    // by rank, the last step
  double step_s = 0;                                // wall time of the last step
};
// The plan on p local threads, each rank holding its v chunks of GPT-2 `c` (seed 3).
// CommError (e.g. a deadlock) and ScheduleRefused propagate.
GptPipelineRun run_gpt_pipeline(const GptConfig& c, const PipelinePlan& plan,
                                const std::vector<TokenBatch>& batches,
                                const GptPipelineOptions& opts = {});

// Sections of the demo.
Section schedule_section(ScheduleKind kind, const PipelineLayout& l);
Section schedules_side_by_side(int p, int m);
// AFAB, 1F1B, interleaved, ZB-H1, ZB-V, DualPipeV at (p, m) (v 2 where a schedule has chunks):
// bubble, activation memory, parameters per rank and sends per step, each measured (simulator,
// registries, the plan's transfers) beside its formula.
Section six_schedules(int p, int m);
// DualPipeV's overlapped pair on a CPU (F&B = F + B) and on a GPU that hides one micro-batch's
// communication under the other's compute (F&B = max(F, B)): the step and the bubble time.
Section dualpipev_overlap(int m_per_rank);
Section bubble_sweep(int p);
Section gpt_runs_equal_one_device();
Section measured_bubble(int p, int m);

// Failure modes.
std::vector<std::string> bug_names();  // deadlock, loss-not-divided, tied-not-summed, ...
Section bug_section(const std::string& name);
// The deadlocking mutation: every fused send-and-receive split into receive, then send.
PipelinePlan receive_before_send(PipelinePlan plan);
// A V schedule's lists placed as a loop (chunk 1 of rank r on stage p + r, not 2p - 1 - r).
PipelinePlan v_lists_in_a_loop(ScheduleKind kind, int p, int m);
// Each rank's last W removed from the step (deferred past the optimizer step).
PipelinePlan last_w_deferred(PipelinePlan plan);
// Sends a rank posts in a step, counted in its list, and as its placement implies: m per
// neighbour stage on another rank, per direction.
int sends_in_plan(const PipelinePlan& plan, int rank);
int sends_of_placement(const PipelineLayout& l, int rank);
// 8 blocks, 16 wide, 2 heads, 8 positions, 32 tokens: every layout of the lesson (p v <= 8).
GptConfig small_gpt();
// The same floats bit for bit (NaN payloads included), the lesson's bitwise claims.
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace mixpar::ch07
