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
//   zb-v         ZB-V (Qi et al. 2023, section 6): two chunks per rank in a V (rank r holds
//                stages r and 2p - 1 - r), F, B and W of each chunk interleaved as PyTorch's
//                ScheduleZBVZeroBubble lists them (docs/SOURCES.md): zero bubble in the steady
//                state when T_F = T_B = T_W, at 1F1B's peak activation memory.
//   dualpipev    DeepSeek's DualPipeV (the V half of DualPipe, docs/SOURCES.md): the same V,
//                m >= 2p, and in the steady state the forward of one micro-batch paired with
//                the backward of another on the rank's other chunk (kOverlapForwardBackward:
//                one action, run in sequence on a CPU; on a GPU the pair's compute hides the
//                other's communication, which the simulator's overlap cost models).
//
// Chunk placement is part of the layout (Placement): loop (chunk c of rank r is stage c p + r,
// Megatron's) or V (chunk 0 is stage r, chunk 1 stage 2p - 1 - r). Everything that maps a
// chunk to a stage (the transfers, the runtime, the trainer's chunk models and registries,
// the memory bill, the stage gather) asks the layout. In the V, stages p - 1 and p share
// rank p - 1 (their hand-off is a local copy, no transfer) and rank 0 holds both ends of the
// model (the embedding and the tied head: one wte, no copy to sum).
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

enum class ScheduleKind : std::uint8_t { kAfab, kOneFOneB, kInterleaved, kZbH1, kZbV, kDualPipeV };
// "afab", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"
std::string_view schedule_name(ScheduleKind k);
// InputError "--schedule: 'x' is not one of afab|1f1b|interleaved|zb-h1|zb-v|dualpipev".
ScheduleKind parse_schedule(const std::string& name);
std::vector<std::string> schedule_names();
std::vector<ScheduleKind> all_schedules();  // in the order above

// Some backward of the schedule is split into B and W (zb-h1, zb-v; dualpipev splits some).
bool splits_backward(ScheduleKind k);

enum class Placement : std::uint8_t { kLoop, kV };
// The placement a schedule's lists are written for: kV for zb-v and dualpipev.
Placement placement_of(ScheduleKind k);

enum class Work : std::uint8_t {
  kForward,         // F
  kBackward,        // B: input and weight gradients together
  kBackwardInput,   // B of a split backward: the input gradient only
  kBackwardWeight,  // W: the weight gradient
  kTransfer,        // sends and receives, posted together
  // F of (micro_batch, chunk) paired with the whole backward of (bwd_micro_batch,
  // bwd_chunk): DualPipeV's OVERLAP_F_B, one scheduled action (the runtime runs the forward,
  // then the backward).
  kOverlapForwardBackward,
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
  int bwd_micro_batch = -1, bwd_chunk = 0;  // the backward of kOverlapForwardBackward
  bool operator==(const Action&) const = default;
};
using RankProgram = std::vector<Action>;

struct PipelineLayout {
  int pp = 1;              // p: ranks along the pipeline
  int micro_batches = 1;   // m per optimizer step
  int virtual_stages = 1;  // v: model chunks per rank
  Placement placement = Placement::kLoop;  // which stages a rank's chunks run
  int stages() const { return pp * virtual_stages; }
  // Loop: chunk c of rank r is stage c p + r. V (v = 2): chunk 0 is stage r, chunk 1 stage
  // 2p - 1 - r, so stage s < p is on rank s and stage s >= p on rank 2p - 1 - s.
  int stage_of(int rank, int chunk) const {
    return placement == Placement::kV && chunk % 2 == 1 ? (chunk + 1) * pp - 1 - rank
                                                         : chunk * pp + rank;
  }
  int rank_of(int stage) const {
    return placement == Placement::kV && (stage / pp) % 2 == 1 ? pp - 1 - stage % pp
                                                               : stage % pp;
  }
  int chunk_of(int stage) const { return stage / pp; }
};

struct PipelinePlan {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  PipelineLayout layout;
  std::vector<RankProgram> ranks;  // by pp rank
  bool split_backward() const { return splits_backward(kind); }
};

// The communicator tag a pipeline message travels on: messages of one tag between a pair of
// ranks arrive in the order sent. The loop placement sends everything on one tag (its
// receives come in the order of the sends). The V does not: between ranks r and r + 1 flow
// chunk 0's activations and chunk 1's gradients one way, chunk 1's activations and chunk 0's
// gradients the other, each in its own order, so activations and gradients get a tag each.
int message_tag(Payload what, const PipelineLayout& layout);

// InputError naming the numbers when the layout cannot run the schedule: p, m, v < 1; v > 1
// for a schedule without virtual stages; interleaved with v < 2 or m not a multiple of p;
// zb-v and dualpipev with v != 2 or p < 2 (two chunks per rank in a V, exactly), dualpipev
// with m < 2p; a placement other than the schedule's.
void check_layout(ScheduleKind kind, const PipelineLayout& layout);
// The layout of (p, m, v) with the schedule's placement.
PipelineLayout layout_for(ScheduleKind kind, int pp, int micro_batches, int virtual_stages);

// The compute actions of each rank, in order (no transfers).
std::vector<RankProgram> compute_order(ScheduleKind kind, const PipelineLayout& layout);
// The compute order with its transfers inserted and send-then-receive pairs fused.
std::vector<RankProgram> with_transfers(const std::vector<RankProgram>& compute,
                                        const PipelineLayout& layout);
// check_layout, compute_order, with_transfers. The layout's placement is the schedule's
// (layout_for): a V schedule given a loop layout is placed as a V.
PipelinePlan make_plan(ScheduleKind kind, PipelineLayout layout);

// "F mb3 c1", "B mb0", "send act mb2 to r1 + recv grad mb0 from r1".
std::string describe(const Action& a, const PipelineLayout& layout);
// Warm-up forwards of rank r before its first backward, as the schedule defines them.
int warmup_forwards(ScheduleKind kind, const PipelineLayout& layout, int rank);

}  // namespace mixpar::ch07
