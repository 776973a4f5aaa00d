#include "mesh_rules.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "report/format.h"
#include "util/errors.h"

namespace mixpar::ch08 {

namespace {

using mixpar::num;  // report/format.h: integers exactly

std::string n(int v) { return num(static_cast<std::int64_t>(v)); }

// The degrees' product, saturated above any rank count (each degree is >= 1 here).
std::int64_t product(const std::vector<MeshDim>& dims) {
  std::int64_t p = 1;
  for (const MeshDim& d : dims) p = std::min<std::int64_t>(p * d.size, std::int64_t{1} << 40);
  return p;
}

// A dimension of the standard mesh (device_mesh.h), each split over by a strategy of the
// factory (strategy_factory.h).
bool standard(const std::string& name) {
  for (const MeshDim& d : standard_dims(1, 1, 1, 1)) {
    if (d.name == name) return true;
  }
  return false;
}

std::string degrees(const TrainerConfig& c) {
  for (const MeshDim& d : mesh_dims(c)) {
    if (d.size < 1) return "--" + d.name + " " + n(d.size) + ": every degree must be >= 1";
  }
  return "";
}

// Every rank has one place: the degrees multiply to the world.
std::string world(const TrainerConfig& c) {
  const std::vector<MeshDim> dims = mesh_dims(c);
  const std::int64_t p = product(dims);
  if (p == c.ranks) return "";
  return mesh_text(dims, "--") + " = " + num(p) + " ranks, but the run has " + n(c.ranks) +
         " (--ranks, or mpirun's -np): every rank has one place in the grid";
}

// A dimension no chapter of this trainer splits over is carried at size 1 (a factor 1 in the
// rank formula: every rank and group unchanged); a larger one needs its chapter's strategy.
std::string unused_dims(const TrainerConfig& c) {
  for (const MeshDim& d : mesh_dims(c)) {
    if (!standard(d.name) && d.size != 1) {
      return d.name + " " + n(d.size) + ": no strategy of this trainer splits over " + d.name +
             " (its degree must be 1)";
    }
  }
  return "";
}

// Context parallel (chapter 6, part 2): the zigzag split cuts each sequence into 2 cp chunks.
std::string cp_divides_seq(const TrainerConfig& c) {
  if (c.cp == 1 || c.seq % (2 * static_cast<std::int64_t>(c.cp)) == 0) return "";
  return "--cp " + n(c.cp) + ": --seq " + num(c.seq) + " is not divisible by 2 x cp = " +
         num(2 * static_cast<std::int64_t>(c.cp)) +
         " (the balanced split gives each rank chunks r and 2cp-1-r)";
}

// All-to-all (DeepSpeed-Ulysses) gives each cp rank whole heads of this tp rank's.
std::string cp_divides_heads(const TrainerConfig& c) {
  if (c.cp == 1 || c.cp_algo != "all-to-all" || c.model.n_head % (c.tp * c.cp) == 0) return "";
  return "--cp-algo all-to-all: --cp " + n(c.cp) + " does not divide the " +
         num(c.model.n_head / std::max(1, c.tp)) +
         " heads of a tp rank: each cp rank takes whole heads";
}

// Tensor parallel (chapter 6): Megatron's split needs whole heads and whole MLP columns on
// each rank. Whole heads are the rule: n_head divides n_embd (GptConfig::validate), so a tp
// that divides n_head divides the MLP width 4 x n_embd too; the vocabulary is padded to a
// multiple of tp, so it need not divide.
std::string tp_divides_heads(const TrainerConfig& c) {
  if (c.model.n_head % c.tp == 0) return "";
  return "--tp " + n(c.tp) + " does not divide n_head = " + num(c.model.n_head) +
         ": each tp rank holds whole attention heads";
}

std::string sequence_parallel_needs_tp(const TrainerConfig& c) {
  if (!c.sequence_parallel || c.tp > 1) return "";
  return "--sequence-parallel splits the LayerNorm regions over the tp ranks: it needs --tp > 1";
}

std::string sequence_parallel_rows(const TrainerConfig& c) {
  if (!c.sequence_parallel || (c.batch * c.seq) % c.tp == 0) return "";
  return "--sequence-parallel: --batch x --seq = " + num(c.batch * c.seq) +
         " rows do not split over --tp " + n(c.tp);
}

std::string virtual_stages_need_pp(const TrainerConfig& c) {
  if (c.pp > 1 || c.virtual_stages == 1) return "";
  return "--virtual-stages " + n(c.virtual_stages) + " needs --pp > 1";
}

// The V schedules (chapter 7: zb-v, dualpipev) place exactly two chunks on each pp rank, stages
// r and 2 pp - 1 - r: the mesh's pp dimension holds 2 pp stages, no other count.
std::string v_schedule_two_chunks(const TrainerConfig& c) {
  if (c.pp == 1 || (c.pipeline_schedule != "zb-v" && c.pipeline_schedule != "dualpipev")) {
    return "";
  }
  if (c.virtual_stages == 2) return "";
  return "--schedule " + c.pipeline_schedule + " places two chunks on each pp rank in a V "
         "(stages r and 2 pp - 1 - r): it needs --virtual-stages 2, got " + n(c.virtual_stages);
}

// Pipeline parallel (chapter 7): a block for every stage (every chunk).
std::string pp_has_blocks(const TrainerConfig& c) {
  const std::int64_t stages = static_cast<std::int64_t>(c.pp) * c.virtual_stages;
  if (c.pp == 1 || stages <= c.model.n_layer) return "";
  return "--pp " + n(c.pp) + " x --virtual-stages " + n(c.virtual_stages) + " = " + num(stages) +
         " stages for " + num(c.model.n_layer) + " blocks: every stage needs a block to run";
}

// Pipeline stages of tensor-parallel shards (chapter 8): each tp rank of a stage sends its own
// copy of the whole [B, T, C] activation to the same tp rank of the next stage. Under sequence
// parallelism a stage's boundary holds B T / tp rows, which the runtime's buffers (sized
// [B, T, C]) do not describe.
std::string pp_whole_activations(const TrainerConfig& c) {
  if (c.pp == 1 || c.tp == 1 || !c.sequence_parallel) return "";
  return "--pp " + n(c.pp) + " with --tp " + n(c.tp) +
         " --sequence-parallel: the pipeline sends whole [B, T, C] activations; drop "
         "--sequence-parallel";
}

// ZeRO-1 shards only the optimizer states: each stage's dp group shards its own. Stages 2 and
// 3 would reduce-scatter (2) or re-gather (3) a stage's gradients or parameters at every
// micro-batch of the pipeline, as DeepSpeed, which refuses ZeRO-2/3 with pipeline parallelism,
// says: the traffic of every micro-batch instead of one per step. With dp 1 there is no dp
// group to shard over and no such traffic: every stage runs as stage 0 (make_grad_sync says so
// in the run's log).
std::string pp_zero_stage(const TrainerConfig& c) {
  if (c.pp == 1 || c.zero_stage <= 1 || c.dp == 1) return "";
  return "--pp " + n(c.pp) + " with --zero-stage " + n(c.zero_stage) +
         ": ZeRO-2/3 would reduce-scatter or gather a stage's gradients or parameters at every "
         "micro-batch (DeepSpeed refuses them with pipelines too); use --zero-stage 1 or 0";
}

// ZeRO over tensor-parallel shards needs no rule of its own: each tp rank's dp group partitions
// that rank's own shards (their held elements, zero_partition.h), reduce-scatters its gradients
// (stage 2) and gathers its parameters block by block (stage 3), while the block's tp
// collectives stay on the tp group.

// Expert parallelism (chapter 9) borrows its ranks from dp x cp (ch09_expert_parallel/
// expert_mesh.h): the ep ranks of a dp x cp group hold different experts, so ep must divide
// both the experts (each rank the same number) and dp x cp (whole ep groups).
std::string ep_needs_experts(const TrainerConfig& c) {
  if (c.ep == 1 || c.uses_moe()) return "";
  return "--ep " + n(c.ep) + " shards the experts of MoE blocks: it needs --n-experts > 0";
}
std::string ep_divides_experts(const TrainerConfig& c) {
  if (!c.uses_moe() || c.moe.n_experts % c.ep == 0) return "";
  return "--ep " + n(c.ep) + " does not divide --n-experts " + n(c.moe.n_experts) +
         ": each ep rank holds the same number of whole experts";
}
std::string ep_divides_dp_cp(const TrainerConfig& c) {
  const std::int64_t dp_cp = static_cast<std::int64_t>(c.dp) * c.cp;
  if (!c.uses_moe() || dp_cp % c.ep == 0) return "";
  return "--ep " + n(c.ep) + " does not divide --dp x --cp = " + num(dp_cp) +
         ": the ep ranks are borrowed from the data-parallel ranks (dp x cp = edp x ep)";
}
// What the trainer does not run beside MoE blocks yet: sequence parallelism (the layer takes
// whole rows; a tp rank's sequence shard would route its own rows, and the experts, replicated
// over tp, would then need their gradients summed over tp too). Everything else runs beside
// them: tp (every tp rank of a place runs the same MoE layer on the same tokens, experts whole,
// replicated over tp), cp (each cp rank routes its own rows), pp (each stage holds its blocks'
// layers, each micro-batch's state kept under its slot) and ZeRO 1-3 (the experts' states
// sharded over edp, their parameters and gradients too under stage 3; moe_blocks.h).
std::string moe_dimensions(const TrainerConfig& c) {
  if (!c.uses_moe() || !c.sequence_parallel) return "";
  return "--sequence-parallel with --n-experts: not supported with MoE blocks yet (the MoE "
         "layer takes whole rows; MoE runs over dp, cp, pp, ep and tp)";
}

}  // namespace

std::vector<MeshDim> mesh_dims(const TrainerConfig& c) {
  std::vector<MeshDim> dims = standard_dims(c.dp, c.tp, c.cp, c.pp);
  for (const TrainerConfig::ExtraDim& e : c.extra_dims) {
    auto at = std::find_if(dims.begin(), dims.end(),
                           [&](const MeshDim& d) { return d.name == e.outer; });
    if (at == dims.end()) {
      throw InputError("mesh: dimension " + e.dim.name + " is placed inside " + e.outer +
                       ", which the mesh does not have");
    }
    dims.insert(at + 1, e.dim);
  }
  return dims;
}

DeviceMesh mesh_of(const TrainerConfig& c) { return DeviceMesh(mesh_dims(c)); }

const std::vector<MeshRule>& mesh_rules() {
  static const std::vector<MeshRule> rules = {
      {"degrees", degrees},
      {"world", world},
      {"unused-dimension", unused_dims},
      {"cp-divides-seq", cp_divides_seq},
      {"cp-divides-heads", cp_divides_heads},
      {"tp-divides-heads", tp_divides_heads},
      {"sequence-parallel-needs-tp", sequence_parallel_needs_tp},
      {"sequence-parallel-rows", sequence_parallel_rows},
      {"virtual-stages-need-pp", virtual_stages_need_pp},
      {"v-schedule-two-chunks", v_schedule_two_chunks},
      {"pp-has-blocks", pp_has_blocks},
      {"pp-whole-activations", pp_whole_activations},
      {"pp-zero-stage", pp_zero_stage},
      {"ep-needs-experts", ep_needs_experts},
      {"ep-divides-experts", ep_divides_experts},
      {"ep-divides-dp-cp", ep_divides_dp_cp},
      {"moe-dimensions", moe_dimensions},
  };
  return rules;
}

void check_mesh_rules(const TrainerConfig& c) {
  for (const MeshRule& rule : mesh_rules()) {
    const std::string why = rule.refusal(c);
    if (!why.empty()) throw InputError("mesh rule " + std::string(rule.name) + ": " + why);
  }
}

}  // namespace mixpar::ch08
