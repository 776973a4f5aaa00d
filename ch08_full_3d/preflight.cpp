#include "preflight.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "ch03_master_weights/memory_calculator.h"
#include "ch03_master_weights/moe_memory.h"
#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/model_chunks.h"
#include "ch07_pipeline/pipeline_runtime.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "comm/parallel_grid.h"
#include "mesh_rules.h"
#include "model/gpt_params.h"
#include "report/format.h"
#include "util/checked_math.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

using mixpar::num;

std::string bytes(std::int64_t b) { return format_bytes(static_cast<std::size_t>(std::max<std::int64_t>(b, 0))); }

mem::Precision precision_of(DType d) {
  return d == DType::kF32 ? mem::Precision::kFp32
         : d == DType::kF16 ? mem::Precision::kFp16
                            : mem::Precision::kBf16;
}


// The model chunks pipeline rank `stage` holds: its stage, or its v chunks of an interleaved
// pipeline (chunk k = virtual stage k pp + stage, ch07_pipeline/model_chunks.h), or the V's two
// (stages `stage` and 2 pp - 1 - stage: zb-v, dualpipev); the whole model without a pipeline.
ch07::PipelineLayout pipeline_layout(const TrainerConfig& c) {
  return ch07::layout_for(ch07::parse_schedule(c.pipeline_schedule), c.pp,
                          static_cast<int>(c.grad_accum), c.virtual_stages);
}

std::vector<GptStage> rank_chunks(const TrainerConfig& c, int stage) {
  if (c.pp == 1) return {GptStage{}};
  return ch07::rank_chunk_stages(c.model, stage, c.pp, c.virtual_stages,
                                 pipeline_layout(c).placement);
}

std::int64_t stage_elements(const TrainerConfig& c, int stage) {
  return rank_parameter_count(c, stage);
}

// What a pipeline rank's activations peak at, counted on the action list the run executes
// (chapter 7's make_plan, ch07::peak_held): each forward holds its chunk's blocks until its
// backward frees them (until its W under ZB-H1). That is AFAB's m micro-batches, 1F1B's
// min(pp - r, m) on rank r (Narayanan et al. 2021a), ZB-H1's min(pp, m) on every rank (Qi et
// al. 2023: the B's in flight plus the W's it delays) and interleaved's min(warm-up + 1, m v)
// chunks on rank r, warm-up 2 (pp - r - 1) + (v - 1) pp, each of one chunk's blocks, 1/v of
// the rank's (Narayanan et al. 2021, section 2.2.2). Without a pipeline each micro-batch's
// activations are freed by its backward, one at a time.
struct HeldActivations {
  std::int64_t micro_batches = 1;  // (chunk) micro-batches held at once, at most
  std::int64_t blocks = 0;         // the peak of the blocks whose activations they hold
};
std::vector<HeldActivations> held_activations(const TrainerConfig& c) {
  if (c.pp == 1) return {HeldActivations{1, c.model.n_layer}};
  const ch07::PipelinePlan plan =
      ch07::make_plan(ch07::parse_schedule(c.pipeline_schedule), pipeline_layout(c));
  std::vector<HeldActivations> out;
  for (int r = 0; r < c.pp; ++r) {
    std::vector<std::int64_t> blocks;
    for (const GptStage& st : rank_chunks(c, r)) blocks.push_back(st.blocks(c.model));
    const ch07::RankProgram& program = plan.ranks[static_cast<std::size_t>(r)];
    const std::vector<std::int64_t> ones(blocks.size(), 1);
    out.push_back({ch07::peak_held(program, ones), ch07::peak_held(program, blocks)});
  }
  return out;
}

// "{0,1} {2,3}": each distinct group over the dimensions `dims` of the mesh (the embedding
// group: its pipeline's first and last stage), over the world.
std::string groups_text(const DeviceMesh& m, const std::vector<std::string>& dims) {
  const bool embedding = dims.empty();
  std::set<std::vector<int>> seen;
  std::string out;
  for (int r = 0; r < m.world(); ++r) {
    const std::vector<int> g =
        embedding ? embedding_group(GridShape::of(m), r) : m.group(r, dims);
    if (g.empty() || !seen.insert(g).second) continue;
    if (seen.size() > 8) {
      out += " ...";
      break;
    }
    out += out.empty() ? "{" : " {";
    for (std::size_t i = 0; i < g.size(); ++i) out += (i ? "," : "") + std::to_string(g[i]);
    out += "}";
  }
  return out;
}

std::string ok(const std::string& item, const std::string& text) {
  return "  ok  " + item + ": " + text;
}

// One chunk's elements on one tp rank, in closed form: what make_gpt2_registry registers
// (common/model/gpt_params.cpp) summed without naming a tensor, so that a model of 10^8 blocks
// is billed in microseconds (naming them took minutes and gigabytes before the bill could
// refuse it). A block: ln_1 and ln_2 2C each, c_attn 3C^2/t + 3C/t and c_fc 4C^2/t + 4C/t
// split by columns, the two c_proj weights C^2/t and 4C^2/t split by rows with their C biases
// whole: 12C^2/t + 7C/t + 6C. The first stage adds wpe (P C), the first and the last wte's
// padded vocabulary rows (V'/t C), the last ln_f (2C). Checked: an overflow is an InputError.
std::int64_t chunk_elements(const TrainerConfig& c, const GptStage& st) {
  const std::int64_t C = c.model.n_embd, t = c.tp;
  const std::string what = "the parameters of one rank";
  const std::int64_t block = checked_sum(
      what, checked_sum(what, checked_product(what, {{"", 12}, {"n_embd", C}, {"n_embd / tp", C / t}}),
                        checked_product(what, {{"", 7}, {"n_embd / tp", C / t}})),
      checked_product(what, {{"", 6}, {"n_embd", C}}));
  std::int64_t n = checked_product(what, {{"blocks", st.blocks(c.model)}, {"elements per block", block}});
  if (st.is_first() || st.is_last()) {
    const std::int64_t rows = padded_vocab(c.model.vocab_size, c.tp) / t;
    n = checked_sum(what, n, checked_product(what, {{"vocab rows", rows}, {"n_embd", C}}));
  }
  if (st.is_first()) {
    n = checked_sum(what, n, checked_product(what, {{"n_positions", c.model.n_positions}, {"n_embd", C}}));
  }
  if (st.is_last()) n = checked_sum(what, n, checked_product(what, {{"", 2}, {"n_embd", C}}));
  return n;
}

}  // namespace

std::int64_t rank_parameter_count(const TrainerConfig& c, int stage) {
  std::int64_t n = 0;
  const std::vector<GptStage> chunks = rank_chunks(c, stage);
  bool first = false, last = false;
  for (const GptStage& st : chunks) {
    n = checked_sum("the parameters of one rank", n, chunk_elements(c, st));
    first = first || st.is_first();
    last = last || st.is_last();
  }
  // A rank whose chunks hold both ends of the model (rank 0 of a V: stages 0 and 2 pp - 1)
  // holds the tied wte once: its chunks are one registry under global names
  // (ch07_pipeline/model_chunks.h), so the last chunk's copy is the first's.
  if (chunks.size() > 1 && first && last) {
    n -= padded_vocab(c.model.vocab_size, c.tp) / c.tp * c.model.n_embd;
  }
  return n;
}

std::string RankBill::text() const {
  const std::string mbs = num(micro_batches_in_flight) + (virtual_stages == 1 ? "" : " chunk") +
                          (micro_batches_in_flight == 1 ? " micro-batch" : " micro-batches") +
                          " in flight";
  const std::string where =
      virtual_stages == 1
          ? " (stage " + std::to_string(stage) + ", " + num(parameters) + " parameters, " +
                mbs + ")"
          : " (pp rank " + std::to_string(stage) + ", " + num(parameters) + " parameters in " +
                num(virtual_stages) + " chunks, " + mbs + ": " + num(blocks_held) +
                " blocks' activations)";
  if (offloaded) {
    return "device: parameters " + bytes(param_bytes) + ", gradients " + bytes(grad_bytes) +
           ", activations " + bytes(activation_bytes) + " = " + bytes(device_total()) +
           "; host (offloaded): master weights " + bytes(master_bytes) + ", optimizer state " +
           bytes(optimizer_bytes) + ", FP32 gradients " + bytes(fp32_grad_bytes) + " = " +
           bytes(host_total()) + where;
  }
  const std::string dispatch =
      moe_dispatch_bytes > 0 ? ", all-to-all buffers " + bytes(moe_dispatch_bytes) : "";
  return "parameters " + bytes(param_bytes) + ", gradients " + bytes(grad_bytes + fp32_grad_bytes) +
         ", master weights " + bytes(master_bytes) + ", optimizer state " +
         bytes(optimizer_bytes) + ", activations " + bytes(activation_bytes) + dispatch + " = " +
         bytes(total()) + where;
}

namespace {

// Context parallel (chapter 6, part 2): a rank's layer holds T / cp rows of every [B, T, .]
// activation, and in place of the B H T^2 scores what its attention keeps: the ring one FP32
// log-sum-exp per row and head (B H T / cp x 4 bytes: its blocks are transient), all-to-all
// its head group's q|k|v over the whole sequence and their probabilities (3 B T C / cp and
// B (H / cp) T^2 values; ch06_tensor_parallel/cp_model_attention.h).
std::int64_t cp_activation_bytes_per_layer(const TrainerConfig& c, mem::GptShape shape,
                                           mem::Precision p) {
  const std::int64_t S = shape.seq, B = shape.micro_batch, heads = c.model.n_head / c.tp;
  const std::int64_t channels = c.model.n_embd / c.tp;
  shape.seq = S / c.cp;
  if (c.recompute) {
    return mem::activation_bytes_per_layer(shape, p, c.tp, c.sequence_parallel,
                                           mem::Recompute::kFull);
  }
  const std::int64_t rows = mem::activation_bytes_per_layer(shape, p, c.tp, c.sequence_parallel,
                                                            mem::Recompute::kSelective);
  const auto e = static_cast<std::int64_t>(dtype_size(c.dtype));
  if (c.cp_algo == "all-to-all") {
    return rows + e * (3 * B * S * (channels / c.cp) + B * (heads / c.cp) * S * S);
  }
  return rows + 4 * B * heads * (S / c.cp);
}

// The MoE blocks of pipeline rank `stage` (chapter 9), billed by chapter 3's calculator
// (moe_memory.h: mixpar-mem --n-experts bills the same): the routers and this ep rank's
// experts, their states (the experts' sharded over edp = dp x cp / ep under ZeRO), one
// micro-batch's activations of each block, one block's all-to-all buffers.
mem::MoeBill moe_rank_bill(const TrainerConfig& c, int stage, const mem::GptShape& shape,
                           mem::Precision p) {
  mem::MoeShape m;
  m.n_experts = c.moe.n_experts;
  m.top_k = c.moe.top_k;
  m.moe_every = c.moe_every;
  m.capacity_factor = c.moe.capacity_factor;
  m.ep = c.ep;
  std::int64_t blocks = 0;
  for (const GptStage& st : rank_chunks(c, stage)) {
    blocks += mem::moe_blocks_in(st.first_block, st.first_block + st.blocks(c.model), c.moe_every);
  }
  mem::Layout l;
  l.zero_stage = c.zero_stage;
  l.dp = static_cast<std::int64_t>(c.dp) * c.cp;
  l.tp = c.tp;
  mem::GptShape tokens = shape;
  tokens.seq = shape.seq / c.cp;  // a rank's rows of each sequence
  return mem::moe_bill(tokens, m, blocks, 1, p, mem::Optimizer::kAdamW, l);
}

}  // namespace

RankBill estimate_rank_bill(const TrainerConfig& c) {
  const std::vector<RankBill> bills = estimate_rank_bills(c);
  RankBill worst = bills.front();
  for (const RankBill& b : bills) {
    if (b.device_total() > worst.device_total()) worst = b;
  }
  return worst;
}

std::vector<RankBill> estimate_rank_bills(const TrainerConfig& c) {
  const mem::Precision p = precision_of(c.dtype);
  mem::GptShape shape;
  shape.n_layer = c.model.n_layer;
  shape.n_embd = c.model.n_embd;
  shape.n_head = c.model.n_head;
  shape.vocab_size = c.model.vocab_size;
  shape.seq = c.seq;
  shape.micro_batch = c.batch;
  shape.n_positions = c.model.n_positions;
  const std::int64_t per_layer = c.cp > 1 ? cp_activation_bytes_per_layer(c, shape, p)
                                          : mem::activation_bytes_per_layer(
                                                shape, p, c.tp, c.sequence_parallel,
                                                c.recompute ? mem::Recompute::kFull
                                                            : mem::Recompute::kNone);
  const std::vector<HeldActivations> held = held_activations(c);
  std::vector<RankBill> out;
  for (int s = 0; s < c.pp; ++s) {
    RankBill b;
    b.stage = s;
    b.virtual_stages = c.pp > 1 ? c.virtual_stages : 1;
    b.parameters = stage_elements(c, s);
    const mem::ModelStates st =
        mem::model_states(b.parameters, p, mem::Optimizer::kAdamW, c.dp > 1 ? c.zero_stage : 0,
                          c.dp);
    b.param_bytes = st.parameters;
    b.grad_bytes = st.gradients;
    b.master_bytes = st.master_params;
    b.optimizer_bytes = st.optimizer_state;
    b.fp32_grad_bytes = c.dtype == DType::kF32 ? 0 : st.master_params;
    b.offloaded = c.offload_optimizer;
    b.micro_batches_in_flight = held[static_cast<std::size_t>(s)].micro_batches;
    b.blocks_held = held[static_cast<std::size_t>(s)].blocks;
    b.activation_bytes = checked_product("one rank's activations",
                                         {{"bytes per block", per_layer}, {"blocks held", b.blocks_held}});
    if (c.uses_moe()) {
      // A pipeline rank holds its MoE blocks' share of the blocks it holds in flight.
      const std::vector<GptStage> chunks = rank_chunks(c, s);
      std::int64_t blocks = 0;
      for (const GptStage& chunk : chunks) blocks += chunk.blocks(c.model);
      const mem::MoeBill m = moe_rank_bill(c, s, shape, p);
      const std::int64_t held_moe =
          m.blocks == 0 ? 0 : (b.blocks_held * m.blocks + blocks - 1) / blocks;
      b.moe_parameters = m.router_params + m.expert_params;
      b.parameters = checked_sum("a rank's parameters", b.parameters, b.moe_parameters);
      b.param_bytes = checked_sum("parameter bytes", b.param_bytes, m.states.parameters);
      b.grad_bytes = checked_sum("gradient bytes", b.grad_bytes, m.states.gradients);
      b.master_bytes = checked_sum("master bytes", b.master_bytes, m.states.master_params);
      b.optimizer_bytes =
          checked_sum("optimizer bytes", b.optimizer_bytes, m.states.optimizer_state);
      b.activation_bytes = checked_sum(
          "one rank's activations", b.activation_bytes,
          checked_product("MoE activations", {{"bytes per block", m.activations_per_block},
                                              {"MoE blocks held", held_moe}}));
      b.moe_dispatch_bytes = m.dispatch();
    }
    // Every category fits; their sum must too (total() adds them unchecked).
    std::int64_t sum = 0;
    for (const std::int64_t part : {b.param_bytes, b.grad_bytes, b.fp32_grad_bytes, b.master_bytes,
                                    b.optimizer_bytes, b.activation_bytes, b.moe_dispatch_bytes}) {
      sum = checked_sum("the memory bill of one rank", sum, part);
    }
    out.push_back(b);
  }
  return out;
}

GroupTraffic estimate_group_traffic(const TrainerConfig& c) {
  GroupTraffic t;
  const auto w = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::int64_t btc = c.batch * c.seq * c.model.n_embd * w;  // one boundary tensor
  const std::int64_t m = c.grad_accum;
  for (int s = 0; s < c.pp; ++s) {
    const std::int64_t n = stage_elements(c, s);
    // Ring volumes (REFERENCE.md, collectives): all-reduce 2(N-1)/N, reduce-scatter and
    // all-gather (N-1)/N of the buffer, per rank.
    if (c.dp > 1) {
      // DDP's all-reduce, or ZeRO-1's reduce-scatter of the gradients plus all-gather of the
      // parameters: the same 2(N-1)/N (Rajbhandari et al. 2020). ZeRO-3 gathers the parameters
      // before each micro-batch's forward and backward instead: (1 + 2m)(N-1)/N (chapter 5,
      // the tied wte's second forward gather left out).
      const std::int64_t passes = c.zero_stage == 3 ? 1 + 2 * m : 2;
      t.dp = std::max(t.dp, passes * n * w * (c.dp - 1) / c.dp);
    }
    if (c.tp > 1) {
      // Megatron (Shoeybi et al. 2019): per block and micro-batch two all-reduces forward
      // (after attention and MLP) and two backward (their conjugates); recompute re-runs the
      // forward's two; the vocab-parallel embedding reduces forward, the head's input
      // gradient backward.
      const GptStage st = c.pp > 1 ? gpt_stage(c.model, s, c.pp) : GptStage{};
      const std::int64_t per_mb = (c.recompute ? 6 : 4) * st.blocks(c.model) +
                                  (st.is_first() ? 1 : 0) + (st.is_last() ? 1 : 0);
      t.tp = std::max(t.tp, per_mb * m * 2 * btc * (c.tp - 1) / c.tp);
    }
    if (c.cp > 1) {
      // Chapter 6, part 2 (docs/REFERENCE.md, Context parallelism): per block and micro-batch
      // the ring sends (cp - 1) 2 units forward (again under recompute) and (cp - 1) 4 + 2
      // backward, all-to-all (cp - 1)/cp 4 units each pass, a unit B (T/cp) (C/tp) values;
      // then every gradient is all-reduced over cp.
      const GptStage st = c.pp > 1 ? gpt_stage(c.model, s, c.pp) : GptStage{};
      const std::int64_t unit = c.batch * (c.seq / c.cp) * (c.model.n_embd / c.tp) * w;
      const std::int64_t forwards = c.recompute ? 2 : 1, k = c.cp;
      const std::int64_t per_block =
          c.cp_algo == "all-to-all" ? (forwards + 1) * 4 * unit * (k - 1) / k
                                    : (forwards * 2 * (k - 1) + 4 * (k - 1) + 2) * unit;
      t.cp = std::max(t.cp, per_block * st.blocks(c.model) * m + 2 * n * w * (k - 1) / k);
    }
    if (c.pp > 1) {
      // The V sends both ways on both chunks: twice a loop stage's boundaries.
      const bool middle = s > 0 && s < c.pp - 1;
      const std::int64_t v_shape = pipeline_layout(c).placement == ch07::Placement::kV ? 2 : 1;
      t.pp = std::max(t.pp, v_shape * (middle ? 2 : 1) * m * btc);
    }
  }
  // The V holds the embedding and the head on rank 0: no tied copy to sum.
  if (c.pp > 1 && pipeline_layout(c).placement == ch07::Placement::kLoop) {
    // The tied wte's gradient, all-reduced between two ranks: its (padded) vocabulary shard.
    t.embedding = padded_vocab(c.model.vocab_size, c.tp) / c.tp * c.model.n_embd * w;
  }
  return t;
}

std::vector<std::string> preflight_checklist(const TrainerConfig& c, std::int64_t data_tokens,
                                             int ranks_here) {
  std::vector<std::string> out = {"pre-flight checklist (docs/SOURCES.md, Pre-flight items):"};
  const DeviceMesh g = mesh_of(c);
  std::string grid = g.str() + " = " + num(g.world()) + " rank" + (g.world() == 1 ? "" : "s");
  if (g.world() > 1) {
    grid += " | tp groups " + groups_text(g, {"tp"}) + " | dp groups " + groups_text(g, {"dp"}) +
            " | pp groups " + groups_text(g, {"pp"});
    if (c.cp > 1) {
      grid += " | cp groups " + groups_text(g, {"cp"}) + " | gradients summed over dp x cp " +
              groups_text(g, {"dp", "cp"}) + " (" + c.cp_algo + " attention, zigzag split)";
    }
    if (c.pp > 1) grid += " | embedding " + groups_text(g, {});
  }
  out.push_back(ok("grid", grid));
  // Divisibility: validate() has refused every layout where one of these fails.
  std::string div = "n_head " + num(c.model.n_head) + " / tp " + num(c.tp) + " = " +
                    num(c.model.n_head / c.tp) + " heads per rank, MLP " +
                    num(4 * c.model.n_embd) + " / tp = " + num(4 * c.model.n_embd / c.tp) +
                    " columns, vocab " + num(c.model.vocab_size);
  const std::int64_t vp = padded_vocab(c.model.vocab_size, c.tp);
  div += vp == c.model.vocab_size
             ? " / tp = " + num(vp / c.tp) + " rows"
             : " padded to " + num(vp) + " / tp = " + num(vp / c.tp) + " rows";
  div += ", n_layer " + num(c.model.n_layer) + " over pp " + num(c.pp) + " = ";
  for (int s = 0; s < c.pp; ++s) {
    const std::int64_t blocks =
        c.pp > 1 ? gpt_stage(c.model, s, c.pp).blocks(c.model) : c.model.n_layer;
    div += (s ? "+" : "") + num(blocks);
  }
  div += " blocks";
  out.push_back(ok("divides", div));
  out.push_back(ok("batch", "global batch = dp " + num(c.dp) + " x B " + num(c.batch) +
                                " x m " + num(c.grad_accum) + " = " +
                                num(c.sequences_per_step()) + " sequences x T " + num(c.seq) +
                                " = " + num(c.tokens_per_step()) + " tokens per step"));
  out.push_back(ok("positions", "seq " + num(c.seq) + " <= n_positions " +
                                    num(c.model.n_positions)));
  const RankBill bill = estimate_rank_bill(c);
  std::string memory = "per rank " + bill.text();
  if (c.device_memory > 0) {
    memory += std::string(" of --device-memory ") +
              bytes(static_cast<std::int64_t>(c.device_memory)) + " (" +
              (bill.offloaded ? "device " : "") +
              pct(static_cast<double>(bill.device_total()) / c.device_memory) + ")";
  }
  out.push_back(ok("memory", memory));
  const std::int64_t avail = mem_available_bytes();
  if (avail >= 0) {
    out.push_back(ok("host memory", num(ranks_here) + " rank" + (ranks_here == 1 ? "" : "s") +
                                        " on this machine x " + bytes(bill.total()) + " = " +
                                        bytes(checked_product("the ranks' memory", {{"ranks", ranks_here}, {"bytes per rank", bill.total()}})) +
                                        " of MemAvailable " + bytes(avail)));
  }
  const GroupTraffic t = estimate_group_traffic(c);
  if (g.world() > 1) {
    std::string traffic = "per step from the busiest rank (ring volumes): dp " + bytes(t.dp);
    if (c.dp > 1) {
      traffic += c.zero_stage == 3   ? " (ZeRO-3: reduce-scatter + two all-gathers a micro-batch)"
                 : c.zero_stage >= 1 ? " (ZeRO: reduce-scatter + all-gather)"
                                     : " (all-reduce)";
    }
    traffic += ", tp " + bytes(t.tp) + ", pp " + bytes(t.pp);
    if (c.pp > 1) traffic += ", embedding " + bytes(t.embedding);
    if (c.cp > 1) traffic += ", cp " + bytes(t.cp) + " (" + c.cp_algo + " attention, gradient sums)";
    out.push_back(ok("traffic", traffic + "; measured: comm_bytes_by_rank in the JSONL"));
  }
  if (c.pp > 1) {
    const ch07::PipelinePlan plan =
        ch07::make_plan(ch07::parse_schedule(c.pipeline_schedule), pipeline_layout(c));
    out.push_back(ok("pipeline", ch07::preflight_summary(plan)));
  }
  const std::int64_t window = c.dp * c.batch * c.seq;
  const std::int64_t windows = window > 0 ? (data_tokens - 1) / window : 0;
  const std::int64_t needed = c.steps * c.grad_accum;
  std::string data = num(data_tokens) + " tokens = " + num(windows) + " windows of " +
                     num(window) + " tokens; " + num(c.steps) + " steps x m " +
                     num(c.grad_accum) + " read " + num(needed) + " windows: ";
  if (needed <= windows) {
    data += "no window repeats (" + pct(windows > 0 ? double(needed) / double(windows) : 0) +
            " of one epoch)";
  } else {
    data += num(double(needed) / double(windows), 3) + " epochs (" +
            num((needed + windows - 1) / windows) + " passes; each epoch reads every window once)";
  }
  out.push_back(ok("data", data));
  return out;
}

std::int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream s(line.substr(13));
    std::int64_t kib = -1;
    s >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

void check_memory(const TrainerConfig& c, int ranks_on_this_machine,
                  std::int64_t available_bytes) {
  const RankBill bill = estimate_rank_bill(c);
  // The device's bill only: what --offload-optimizer moves to the host is not the device's.
  if (c.device_memory > 0 && static_cast<double>(bill.device_total()) > c.device_memory) {
    throw InputError("one rank needs " + bytes(bill.device_total()) +
                     (bill.offloaded ? " of device memory" : "") + ", over --device-memory " +
                     bytes(static_cast<std::int64_t>(c.device_memory)) + ": " + bill.text() +
                     (bill.offloaded ? "" : "; --offload-optimizer moves the master weights, the "
                                            "FP32 gradients and optimizer state to host memory"));
  }
  const std::int64_t all = checked_product(
      "the memory of this machine's ranks",
      {{"ranks", ranks_on_this_machine}, {"bytes per rank", bill.total()}});
  if (available_bytes >= 0 && all > available_bytes) {
    throw InputError(num(ranks_on_this_machine) + " rank" +
                     (ranks_on_this_machine == 1 ? " on this machine needs " : "s on this machine need ") +
                     bytes(all) + ", over its MemAvailable " + bytes(available_bytes) +
                     " (/proc/meminfo): per rank " + bill.text());
  }
}

}  // namespace mixpar::ch08
