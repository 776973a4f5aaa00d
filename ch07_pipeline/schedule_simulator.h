// Two plays of a plan's action lists against each other, neither running any compute.
//
// The pre-flight check (preflight): every rank's list played with buffered sends, as the
// local and MPI backends send (a send returns once its message is queued; Communicator::send).
// Every send must meet the receive of the same message (payload, micro-batch, producing stage)
// in the order the peer posts its receives on that channel (one tag per pair of ranks: messages
// between a pair arrive in order), nothing may be left unreceived, and no cycle of waits may
// form; otherwise the plan is refused before the run, with the two ranks and actions named.
// The same play with rendezvous sends (a send completes only when its receiver takes it, as
// NCCL's do) says whether the plan also runs on such a backend: AFAB, 1F1B and ZB-H1 do;
// interleaved with m > p needs buffering (two neighbours send to each other at once).
//
// The unit-cost timeline (play with kEager): T_F = 1, T_B = 2, B = W = 1 when the backward is
// split, an overlapped forward-and-backward pair F&B = T_F + T_B = 3 (as a CPU runs it: one
// after the other), transfers free and sends never waiting; each action starts as soon as its
// rank is free and its data is there. From it: bubble_fraction = idle / (p x makespan) and the
// micro-batches each rank holds at once (bubble.h).
//
// Two more checks of every play: a stage fed by a stage on the same rank (the V's p - 1 and
// p) must come after it in the rank's list (nothing is sent, so nothing could be waited for),
// and every micro-batch a rank runs forward must have its input and weight gradients in the
// step (a W left out, or deferred past the step, would miss the optimizer step).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ch07_pipeline/pipeline_schedule.h"
#include "comm/communicator.h"
#include "util/errors.h"

namespace mixpar::ch07 {

enum class SendMode : std::uint8_t { kEager, kRendezvous };

// Unit costs of one chunk's compute (a chunk of an interleaved rank counts as a stage: the
// time unit is then a chunk's forward, T_F / v).
// overlapped: a kOverlapForwardBackward pair (DualPipeV). On a CPU the pair runs in sequence:
// T_F + T_B. On a GPU its two halves run on streams of their own and one micro-batch's
// communication (the pipeline's sends, an MoE's all-to-all) hides under the other's compute,
// which is what DualPipe overlaps: a cost below T_F + T_B models it (the lesson uses
// max(T_F, T_B) = 2, a pair costing its longer half).
struct UnitCosts {
  std::int64_t forward = 1, backward = 2, backward_input = 1, backward_weight = 1;
  std::int64_t overlapped = 3;
  std::int64_t of(Work w) const;  // 0 for a transfer
};

struct TimedAction {
  Action action;
  std::int64_t start = 0, end = 0;
};

struct Timeline {
  std::vector<std::vector<TimedAction>> ranks;
  std::int64_t makespan = 0;  // the end of the last compute action
};

// What went wrong in a play, with the two ranks and the actions they are stuck in.
struct PlayProblem {
  std::string what;  // one line: "deadlock: rank 0 waits in 'recv grad mb0 from r1' ..."
  int rank_a = -1, rank_b = -1;
  std::string action_a, action_b;
};

struct PlayResult {
  bool ok = false;
  Timeline timeline;  // complete when ok
  PlayProblem problem;
};

PlayResult play(const PipelinePlan& plan, SendMode mode, const UnitCosts& costs = {});

// A plan the pre-flight check refuses: an input error (exit code 2), raised before any compute.
class ScheduleRefused : public InputError {
 public:
  explicit ScheduleRefused(PlayProblem p)
      : InputError("pipeline pre-flight: " + p.what), problem(std::move(p)) {}
  PlayProblem problem;
};

// Plays the plan as the backend in use sends (kEager: buffered, as the local backend's default
// and MPI's; kRendezvous: sends that wait for their receiver, as NCCL's and the local
// backend's synchronous mode); throws ScheduleRefused naming the ranks and actions, and, for
// a plan that only buffering saves, the send mode that refuses it.
void preflight(const PipelinePlan& plan, SendMode mode = SendMode::kEager);
// The mode to play a plan in for this communicator (Communicator::sends_wait_for_receiver).
SendMode send_mode_of(const Communicator& comm);
// Whether the plan also completes when every send waits for its receiver.
bool survives_rendezvous_sends(const PipelinePlan& plan);

}  // namespace mixpar::ch07
