// A pipeline schedule as data: a pure function of (p stages, m micro-batches, v virtual stages
// per rank) giving each rank an ordered list of actions. The runtime (pipeline_runtime.h)
// executes a list and knows no schedule by name; the simulators (schedule_simulator.h) play
// the lists against each other before any compute.
//
// Virtual stages: a rank holds v model chunks; chunk c of rank r is virtual stage s = c p + r
// of the S = p v stages the blocks are split into (Narayanan et al. 2021, section 2.2.2; with
// v = 1, stage s is rank s). A micro-batch's activation goes from stage s to s + 1, its
// gradient from s + 1 back to s (docs/REFERENCE.md, Pipeline bubbles).
//
//   afab         GPipe (Huang et al. 2019): all m forwards, then all m backwards.
//   1f1b         PipeDream-Flush (Narayanan et al. 2021a): rank r runs min(p - r - 1, m) warm-up
//                forwards, then one forward and one backward in turn, then the cool-down.
//   interleaved  Megatron-LM's interleaved 1F1B (original form): v >= 2 chunks per rank, m a
//                multiple of p; warm-up 2 (p - r - 1) + (v - 1) p forwards on rank r (all m v
//                when m = p), forward k on chunk (k / p) % v, backward k on chunk
//                v - 1 - (k / p) % v, both of micro-batch (k / (p v)) p + k % p.
//   zb-h1        Zero Bubble H1 (Qi et al. 2023): the backward split into B (input gradient,
//                on the critical path) and W (weight gradient, any time later); B before F,
//                F while fewer than p - r micro-batches are held (1F1B's peak), W to fill what
//                would be idle, so the bubble drops to (p - 1)(T_F + T_B - T_W).
//
// Transfers are inserted where the data flows: a receive right before the forward or
// backward that needs it, a send right after the action that produced it; a send followed by
// a receive becomes one action that posts both (Megatron's send_forward_recv_backward), the
// communicator's sendrecv, so that two neighbours sending to each other at once never wait
// for each other.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixpar::ch07 {

enum class ScheduleKind : std::uint8_t { kAfab, kOneFOneB, kInterleaved, kZbH1 };
std::string_view schedule_name(ScheduleKind k);  // "afab", "1f1b", "interleaved", "zb-h1"
// InputError "--schedule: 'x' is not one of afab|1f1b|interleaved|zb-h1".
ScheduleKind parse_schedule(const std::string& name);
std::vector<std::string> schedule_names();

enum class Work : std::uint8_t {
  kForward,         // F
  kBackward,        // B: input and weight gradients together
  kBackwardInput,   // B of a split backward: the input gradient only
  kBackwardWeight,  // W: the weight gradient
  kTransfer,        // sends and receives, posted together
};
enum class Payload : std::uint8_t { kActivation, kGradient };

// One message of a transfer. from_stage is the virtual stage that produced it: with the
// micro-batch and the payload it names the message, which the simulator matches against
// what the peer receives.
struct Transfer {
  bool send = true;
  int peer = 0;  // the rank sent to or received from (a rank of the pp group)
  Payload what = Payload::kActivation;
  int micro_batch = 0;
  int from_stage = 0;
  bool operator==(const Transfer&) const = default;
};

struct Action {
  Work work = Work::kForward;
  int micro_batch = -1;  // compute actions
  int chunk = 0;         // the rank's model chunk (compute actions)
  std::vector<Transfer> transfers;  // kTransfer: at most one send and one receive
  bool operator==(const Action&) const = default;
};
using RankProgram = std::vector<Action>;

struct PipelineLayout {
  int pp = 1;              // p: ranks along the pipeline
  int micro_batches = 1;   // m per optimizer step
  int virtual_stages = 1;  // v: model chunks per rank
  int stages() const { return pp * virtual_stages; }
  int stage_of(int rank, int chunk) const { return chunk * pp + rank; }
  int rank_of(int stage) const { return stage % pp; }
  int chunk_of(int stage) const { return stage / pp; }
};

struct PipelinePlan {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  PipelineLayout layout;
  std::vector<RankProgram> ranks;  // by pp rank
  bool split_backward() const { return kind == ScheduleKind::kZbH1; }
};

// InputError naming the numbers when the layout cannot run the schedule: p, m, v < 1; v > 1
// for a schedule without virtual stages; interleaved with v < 2 or m not a multiple of p.
void check_layout(ScheduleKind kind, const PipelineLayout& layout);

// The compute actions of each rank, in order (no transfers).
std::vector<RankProgram> compute_order(ScheduleKind kind, const PipelineLayout& layout);
// The compute order with its transfers inserted and send-then-receive pairs fused.
std::vector<RankProgram> with_transfers(const std::vector<RankProgram>& compute,
                                        const PipelineLayout& layout);
// check_layout, compute_order, with_transfers.
PipelinePlan make_plan(ScheduleKind kind, const PipelineLayout& layout);

// "F mb3 c1", "B mb0", "send act mb2 to r1 + recv grad mb0 from r1".
std::string describe(const Action& a, const PipelineLayout& layout);
// Warm-up forwards of rank r before its first backward, as the schedule defines them.
int warmup_forwards(ScheduleKind kind, const PipelineLayout& layout, int rank);

}  // namespace mixpar::ch07
