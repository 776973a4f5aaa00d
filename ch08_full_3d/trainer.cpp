// One training step in chapter 3's order: forward and backward of each micro-batch (loss scale on
// the seed gradient), then unscale -> inf check -> clip -> AdamW on the FP32 masters -> re-cast.
// Distributed, the seams of common/parallel do the talking: the schedule runs the micro-batches
// and tells the gradient sync when the last backward starts, the sync makes the replicas'
// gradients agree, and the step's reductions (loss, found-inf, norm) each go over their group.
#include "trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "ch06_tensor_parallel/tp_gather.h"
#include "comm/control.h"
#include "ch07_pipeline/model_chunks.h"
#include "ch07_pipeline/stage_gather.h"
#include "model/gpt_hf.h"
#include "mesh_rules.h"
#include "model_flops.h"
#include "parallel/count_once.h"
#include "parallel/replicas.h"
#include "run_watch.h"
#include "cp_rows.h"
#include "strategy_factory.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

TrainerConfig validated(TrainerConfig c) {
  validate(c);
  return c;
}

GptOptions model_options(const TrainerConfig& c, BlockGemms* gemms) {
  GptOptions o;
  o.gemms = gemms;
  o.dtype = c.dtype;
  o.seed = c.seed;
  o.recompute = c.recompute;
  return o;
}

// GPT-2's two param groups: 2-D weights decay, biases and LayerNorm gains do not; the mask
// is by piece of what this rank's optimizer steps (GradSync::owned_weight_decay).
ch03::MixedPrecisionConfig optimizer_config(const TrainerConfig& c, std::vector<bool> decays) {
  ch03::MixedPrecisionConfig m;
  m.optimizer = ch03::OptimizerKind::kAdamW;
  m.adamw = AdamWConfig{c.schedule.lr, c.beta1, c.beta2, c.eps, c.weight_decay};
  m.weight_decay_mask = std::move(decays);
  m.max_grad_norm = c.grad_clip;
  m.offload = c.offload_optimizer;  // masters, FP32 gradients and moments: host memory
  // Only fp16 needs a scaler: bf16 has FP32's exponent range, so small gradients survive.
  m.scaler = c.dtype == DType::kF16 ? ch02::pytorch_config() : ch02::no_scaling_config();
  if (c.dtype == DType::kF16) m.scaler.init_scale = c.loss_scale;
  return m;
}

std::unique_ptr<ParallelGrid> make_grid(Communicator* world, const TrainerConfig& c) {
  if (world == nullptr) return nullptr;
  return std::make_unique<ParallelGrid>(*world, mesh_of(c));
}

// The tp x pp placement of this rank's model: its tp shard (Megatron's split, chapter 6).
GptOptions stage_options(GptOptions o, const ParallelGrid* grid, TensorParallelGroup* tp_ops,
                         bool sequence_parallel, AttentionSeam* cp_attention = nullptr) {
  o.attention = cp_attention;  // context parallel: this rank's rows, attention over cp
  if (tp_ops != nullptr) {
    o.tp = TensorShard{grid->coord().tp, grid->shape().tp};
    o.tp_ops = tp_ops;
    o.sequence_parallel = sequence_parallel;
  }
  return o;
}

// Chapter 7: with pp > 1 this rank runs stage coord.pp of the model (gpt_stage's split rule).
GptOptions with_pipeline_stage(GptOptions o, const GptConfig& model, const ParallelGrid* grid) {
  if (grid != nullptr && grid->shape().pp > 1) {
    o.stage = gpt_stage(model, grid->coord().pp, grid->shape().pp);
  }
  return o;
}

// Chapter 7's interleaved pipeline (--virtual-stages v > 1): one registry of this rank's v
// chunks (model_chunks.h: chunk k runs virtual stage k pp + coord.pp), allocated and
// initialised from the whole model's offsets, so each chunk starts as the same blocks of one
// device. Null otherwise.
// The chunks' placement: the schedule's (loop; the V for zb-v and dualpipev).
ch07::PipelineLayout chunk_layout(const TrainerConfig& c) {
  return ch07::layout_for(ch07::parse_schedule(c.pipeline_schedule), c.pp,
                          static_cast<int>(c.grad_accum), c.virtual_stages);
}

std::unique_ptr<ParamRegistry> make_chunk_params(const TrainerConfig& c, const ParallelGrid* grid) {
  if (grid == nullptr || c.virtual_stages == 1) return nullptr;
  const GridCoord at = grid->coord();
  auto r = std::make_unique<ParamRegistry>(ch07::make_chunks_registry(
      c.model,
      ch07::rank_chunk_stages(c.model, at.pp, c.pp, c.virtual_stages, chunk_layout(c).placement),
      TensorShard{at.tp, c.tp}));
  r->allocate(c.dtype);
  r->initialize(c.seed);
  return r;
}

// Chunk k of this rank: its virtual stage, its parameters views of `params` (o unchanged
// without them: one chunk per rank).
GptOptions chunk_options(GptOptions o, const TrainerConfig& c, const ParallelGrid* grid, int k,
                         ParamRegistry* params) {
  if (params == nullptr) return o;
  const ch07::PipelineLayout l = chunk_layout(c);
  o.stage = gpt_stage(c.model, l.stage_of(grid->coord().pp, k), l.stages());
  o.params = params;
  // The V's rank 0 runs the embedding and the head on the registry's one wte.
  o.wte_grad_shared = l.placement == ch07::Placement::kV && grid->coord().pp == 0;
  return o;
}

// Chunks 1 .. v - 1 of an interleaved pipeline's rank (chunk 0 is the trainer's model_).
std::vector<GptModel> later_chunks(const TrainerConfig& c, const ParallelGrid* grid,
                                   TensorParallelGroup* tp_ops, ParamRegistry* params,
                                   AttentionSeam* cp_attention, BlockGemms* gemms,
                                   FeedForwardSeam* feed_forward) {
  std::vector<GptModel> out;
  if (params == nullptr) return out;
  out.reserve(static_cast<std::size_t>(c.virtual_stages - 1));
  for (int k = 1; k < c.virtual_stages; ++k) {
    GptOptions o = chunk_options(stage_options(model_options(c, gemms), grid, tp_ops,
                                               c.sequence_parallel, cp_attention),
                                 c, grid, k, params);
    o.feed_forward = feed_forward;  // the chunk's MoE blocks (make_moe holds every chunk's)
    out.emplace_back(c.model, o);
  }
  return out;
}

// Chapter 9's MoE blocks (null for a dense model): collective over the world, which their
// expert groups are split from. A pipeline's rank holds only the MoE blocks of its chunks (in
// the schedule's placement), so each MoE layer lives on one stage, as its block does.
std::unique_ptr<MoeBlocks> make_moe(const TrainerConfig& c, Communicator* world,
                                    const ParallelGrid* grid) {
  if (!c.uses_moe()) return nullptr;
  std::vector<std::int64_t> blocks;
  if (grid != nullptr && grid->shape().pp > 1) {
    for (const GptStage& s : ch07::rank_chunk_stages(c.model, grid->coord().pp, c.pp,
                                                      c.virtual_stages,
                                                      chunk_layout(c).placement)) {
      for (std::int64_t b = s.first_block; b < s.end(c.model); ++b) blocks.push_back(b);
    }
  } else {
    for (std::int64_t b = 0; b < c.model.n_layer; ++b) blocks.push_back(b);
  }
  return std::make_unique<MoeBlocks>(c, grid ? world : nullptr, grid ? &grid->mesh() : nullptr,
                                     blocks, grid ? &grid->clock() : nullptr);
}

GptOptions with_moe(GptOptions o, MoeBlocks* moe) {
  o.feed_forward = moe;
  return o;
}

// The optimizer's tensors: the registry's (as the sync owns them), then the MoE blocks'.
template <class T>
std::vector<T> then(std::vector<T> a, std::vector<T> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
  Eigen::setNbThreads(threads);
}

Trainer::Trainer(TrainerConfig config, TrainingData data, Communicator* world)
    : config_(validated(std::move(config))),
      data_(std::move(data)),
      world_(world),
      grid_(make_grid(world_, config_)),
      tp_ops_(make_tp_ops(grid_.get())),
      cp_attention_(make_cp_attention(grid_.get(), config_)),
      chunk_params_(make_chunk_params(config_, grid_.get())),
      fp8_(config_.fp8 ? std::make_unique<fp8::Fp8BlockGemms>(*config_.fp8, config_.model.n_layer)
                       : nullptr),
      moe_(make_moe(config_, world_, grid_.get())),
      model_(config_.model,
             with_moe(chunk_options(stage_options(with_pipeline_stage(
                                                      model_options(config_, fp8_.get()),
                                                      config_.model, grid_.get()),
                                                  grid_.get(), tp_ops_.get(),
                                                  config_.sequence_parallel, cp_attention_.get()),
                                    config_, grid_.get(), 0, chunk_params_.get()),
                      moe_.get())),
      chunks_(later_chunks(config_, grid_.get(), tp_ops_.get(), chunk_params_.get(),
                           cp_attention_.get(), fp8_.get(), moe_.get())),
      dp_lane_(make_dp_lane(grid_.get(), config_)),
      sync_(make_grad_sync(model_, grid_.get(), config_, dp_lane_.get())),
      // What the optimizer steps is what the sync says this rank owns: every parameter, or
      // (sharded over dp) its pieces, so its masters and moments are 1/dp of them.
      optimizer_(then(sync_->owned_params(rank_params(model_)),
                      moe_ ? moe_->params() : std::vector<Tensor>{}),
                 then(sync_->owned_grads(rank_params(model_)),
                      moe_ ? moe_->grads() : std::vector<Tensor>{}),
                 optimizer_config(config_,
                                  then(sync_->owned_weight_decay(rank_params(model_)),
                                       moe_ ? moe_->weight_decay() : std::vector<bool>{}))),
      reductions_(grid_.get()),
      schedule_(make_schedule(config_, grid_.get(), model_chunks())),
      norm_counted_(sync_->norm_counted(rank_params(model_), coord())),
      // Replica d reads rows d*B .. (d+1)*B-1 of each global window of dp*B*T+1 tokens: the
      // tp and pp ranks of one replica read the same rows.
      loader_(data_.tokens, config_.batch, config_.seq, config_.data_order, config_.seed,
              coord().dp, shape().dp) {
  model_.set_grad_ready_hook([this](std::size_t entry) { sync_->grad_ready(entry); });
  // The V (zb-v, dualpipev) runs the last stage, and so the loss, on pp rank 0.
  if (pipelined()) {
    const ch07::PipelineLayout l = chunk_layout(config_);
    reductions_.loss_on_pp_rank(l.rank_of(l.stages() - 1));
  }
  if (grid_ && optimizer_.scaler().mode() != ch02::ScaleMode::kNone) {
    // One rank's overflow must skip every rank's step, or the replicas and scales part ways.
    optimizer_.set_found_inf_reducer([this](bool found) { return reductions_.found_inf(found); });
  }
  // Every element once, over the world: on a single device exactly global_grad_norm.
  dense_tensors_ = sync_->owned_params(rank_params(model_)).size();
  optimizer_.set_grad_norm_fn([this](std::span<const Tensor> grads32) {
    // The MoE blocks' squares after the registry's, each counted once (moe_blocks.h).
    double sq = sync_->counted_sum_of_squares(grads32.first(dense_tensors_), norm_counted_);
    if (moe_) sq += moe_->counted_sum_of_squares(grads32.subspan(dense_tensors_));
    return reductions_.grad_norm(sq);
  });
  if (fp8_ && grid_ && grid_->tp().size() > 1) {
    // Each tp rank casts its shard: a tensorwise scale is the whole tensor's, its amax the
    // max over the tp group (fp8_linear.h); delayed amaxes are reduced after the step.
    fp8_->set_tp_amax_reduction([this](float amax) {
      Tensor t = Tensor::from_floats(std::vector<float>{amax}, {1});
      grid_->tp().all_reduce(t, ReduceOp::kMax);
      return t.to_floats()[0];
    });
  }
  if (!config_.init_from.empty()) {
    load_initial_weights();  // every rank reads the same directory
    verify_replicas();
  }
}

std::vector<GptModel*> Trainer::model_chunks() {
  std::vector<GptModel*> all = {&model_};
  for (GptModel& m : chunks_) all.push_back(&m);
  return all;
}

void Trainer::verify_replicas() {
  // ZeRO-3: no rank holds a whole copy between steps, and each rank's shard is its own.
  if (grid_ && rank_params(model_).flat_params().resident()) {
    mixpar::verify_replicas(grid_->dp(), rank_params(model_).flat_params());
    if (grid_->cp() != nullptr) {
      mixpar::verify_replicas(*grid_->cp(), rank_params(model_).flat_params());
    }
  }
}

std::vector<TraceSpan> Trainer::take_spans() {
  std::vector<TraceSpan> all = std::exchange(spans_, {});
  for (TraceSpan& s : reductions_.take_spans()) all.push_back(std::move(s));
  for (TraceSpan& s : sync_->take_spans()) all.push_back(std::move(s));
  if (!grid_) all.clear();  // a single device records no trace
  return all;
}

std::vector<NamedTensor> Trainer::master_weights() const {
  if (sharded()) throw std::logic_error("Trainer::master_weights: the masters are sharded over dp");
  std::vector<NamedTensor> out;
  const auto entries = rank_params(model_).entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out.push_back({entries[i].name, optimizer_.stepped_params()[i]});
  }
  return out;
}

bool Trainer::sharded() const { return sync_->sharding_stage() != 0; }

bool Trainer::gathers_for_eval() const {
  // MoE: the experts are gathered over ep, and the copy routes alone (no balance group).
  return tp_ops_ || cp_attention_ || pipelined() || sharded() || moe_;
}

void Trainer::save_hf(const std::string& dir) const {
  if (gathers_for_eval() && eval_masters_.empty()) {
    throw std::logic_error("Trainer::save_hf of a tp, pp or ZeRO model before prepare_eval_model");
  }
  save_gpt_hf(dir, config_.model, gathers_for_eval() ? eval_masters_ : master_weights());
}

std::vector<Tensor> Trainer::place_masters() const {
  // The optimizer's FP32 tensors, one per owned piece, made whole (a sum over dp when they
  // are shards).
  // The registry's tensors only: the MoE blocks' follow them in the optimizer.
  return sync_->whole_params(
      rank_params(model_),
      std::span<const Tensor>(optimizer_.stepped_params()).first(dense_tensors_));
}

void Trainer::prepare_eval_model() {
  if (!gathers_for_eval()) return;
  if (moe_) {
    // Every expert of every MoE block onto rank 0's copy (collective over ep). The copy has no
    // capacity limit: evaluation and sampling drop no token, whatever their batch.
    if (rank() == 0 && !eval_moe_) {
      TrainerConfig whole = config_;
      whole.moe.capacity_factor = 0;
      eval_moe_ = std::make_unique<MoeBlocks>(whole);
    }
    moe_->gather_for_eval(rank() == 0 ? eval_moe_.get() : nullptr);
  }
  // 1. The FP32 masters of this rank's (tp, pp) place, whole (ZeRO: over dp).
  const std::vector<Tensor> mine = place_masters();
  // 2. Chapter 6: the tp shards of this stage into its full, unpadded tensors.
  std::vector<NamedTensor> stage;
  if (tp_ops_) {
    stage = ch06::gather_full_tensors(grid_->tp(), rank_params(model_), mine,
                                      config_.model.vocab_size);
  } else {
    const auto entries = rank_params(model_).entries();
    for (std::size_t i = 0; i < entries.size(); ++i) stage.push_back({entries[i].name, mine[i]});
  }
  // 3. Chapter 7: the stages of rank 0's pipeline (dp 0, tp 0) onto its first stage.
  std::vector<NamedTensor> full;
  if (pipelined()) {
    if (coord().dp != 0 || coord().tp != 0 || coord().cp != 0) return;
    const ch07::Placement placement = chunk_layout(config_).placement;
    const ParamRegistry whole_stage = ch07::make_chunks_registry(
        config_.model, ch07::rank_chunk_stages(config_.model, coord().pp, shape().pp,
                                               config_.virtual_stages, placement));
    full = ch07::gather_stages(grid_->pp(), config_.model, whole_stage, tensors_of(stage),
                               config_.virtual_stages, placement);
  } else {
    full = std::move(stage);
  }
  if (rank() != 0) return;
  // Rank 0 keeps them, and a whole model in the working dtype holding them rounded, as the
  // working copy holds them.
  // The gathered copy evaluates with bf16 GEMMs: its casts must not enter the FP8 scaling state.
  if (!eval_model_) {
    eval_model_ = std::make_unique<GptModel>(
        config_.model, with_moe(model_options(config_, nullptr), eval_moe_.get()));
  }
  for (const NamedTensor& w : full) {
    Tensor p = eval_model_->param(w.name);
    p.copy_from(w.tensor);
  }
  eval_masters_ = std::move(full);
}

GptModel& Trainer::eval_model() {
  if (!gathers_for_eval()) return model_;
  if (!eval_model_) throw std::logic_error("Trainer::eval_model before prepare_eval_model");
  return *eval_model_;
}

void Trainer::recast_working_copy() {
  // fp32 without masters: the optimizer stepped the working copy itself. Otherwise each owned
  // piece rounded into its place; then a sharded sync gathers every replica's pieces.
  if (optimizer_.has_masters()) {
    const std::vector<Tensor> views = sync_->owned_params(rank_params(model_));
    for (std::size_t k = 0; k < views.size(); ++k) {
      Tensor v = views[k];
      v.copy_from(optimizer_.stepped_params()[k]);
    }
  }
  sync_->gather_params();
}

void Trainer::load_initial_weights() {
  // Into the FP32 masters, so a 16-bit run starting from FP32 weights keeps all their bits.
  // Sharded, each rank reads only the pieces it holds.
  if (gathers_for_eval()) {
    load_hf_pieces(config_.init_from);
  } else {
    load_gpt_hf_into(config_.init_from, config_.model, master_weights());
  }
  recast_working_copy();
}

ch03::StepReport Trainer::optimizer_step(double lr) {
  optimizer_.set_lr(lr);
  const ch03::StepReport rep = optimizer_.step();
  // Every rank skipped or every rank stepped (the found-inf vote is the world's).
  if (rep.taken) {
    sync_->gather_params();
    if (moe_) moe_->gather_sharded();  // ZeRO over edp: the experts whole again
  }
  return rep;
}

void Trainer::halt_on_non_finite_loss(double loss) {
  prepare_eval_model();  // collective: the weights before this step, whole on rank 0
  std::string where;
  if (rank() == 0) {
    // The step's micro-batches as one device reads them (every replica's rows), replayed
    // until one gives a non-finite loss, then its layers checked in order.
    const TokenLoader whole(data_.tokens, config_.batch * config_.dp, config_.seq,
                            config_.data_order, config_.seed);
    GptModel& m = eval_model();
    for (std::int64_t k = 0; k < config_.grad_accum && where.empty(); ++k) {
      const TokenBatch b = whole.batch_at(step_ * config_.grad_accum + k);
      if (std::isfinite(m.forward(b.inputs, b.targets, b.B, b.T))) continue;
      where = "; the first output that is not finite is " +
              first_non_finite_layer(m, b.inputs, b.B, b.T) + "'s, on micro-batch " +
              std::to_string(k) + " at data position " + std::to_string(b.position) +
              ", epoch " + std::to_string(b.epoch);
    }
  }
  if (world_ != nullptr && world_->size() > 1) {
    // Only rank 0 replayed the step: every rank halts with its finding (whichever rank's
    // message reaches the user).
    where = broadcast_text(*world_, 0, where);
  }
  throw RunHalted("step " + std::to_string(step_ + 1) + ": the loss is " +
                           (std::isnan(loss) ? "nan" : "inf") + " and " +
                           std::string(dtype_name(config_.dtype)) +
                           " has no loss scaler to skip the step: training halted before the "
                           "optimizer stepped" + where);
}

namespace {

// The JSONL's fp8 record: this rank's casts of the step by role (values that saturated or
// flushed to zero, as fractions, and the largest amax), and delayed scaling's layer-0
// attn.c_attn input scale with the max of its amax history (the figure's series).
Json fp8_step_json(const fp8::Fp8StepStats& s, const fp8::Fp8LinearConfig& c) {
  Json j = Json::object();
  j.set("recipe", std::string(fp8::name(c.recipe)));
  const std::pair<const char*, const fp8::CastStats*> roles[] = {
      {"input", &s.input}, {"weight", &s.weight}, {"grad", &s.grad}};
  for (const auto& [role, st] : roles) {
    Json r = Json::object();
    r.set("amax", std::isfinite(st->amax) ? Json(double(st->amax)) : Json());
    r.set("saturated_frac", st->saturated_fraction());
    r.set("flushed_frac", st->flushed_fraction());
    r.set("values", st->values);
    j.set(role, std::move(r));
  }
  // By tensor, this rank's: "h0.attn.input" ... "h1.fc_proj.grad".
  static constexpr const char* kLinear[] = {"attn", "attn_proj", "fc", "fc_proj"};
  static constexpr const char* kRole[] = {"input", "weight", "grad"};
  Json tensors = Json::object();
  for (std::size_t t = 0; t < s.tensors.size(); ++t) {
    const fp8::CastStats& st = s.tensors[t];
    if (st.values == 0) continue;
    Json r = Json::object();
    r.set("amax", std::isfinite(st.amax) ? Json(double(st.amax)) : Json());
    r.set("saturated_frac", st.saturated_fraction());
    r.set("flushed_frac", st.flushed_fraction());
    if (s.scales[t] > 0) r.set("scale", double(s.scales[t]));
    tensors.set("h" + std::to_string(t / 12) + "." + kLinear[t / 3 % 4] + "." + kRole[t % 3],
                std::move(r));
  }
  j.set("tensors", std::move(tensors));
  if (c.recipe == fp8::Recipe::kDelayed) {
    j.set("scale_l0_input", double(s.first_input_scale));
    j.set("amax_history_max_l0_input", double(s.first_input_history_max));
  }
  return j;
}

}  // namespace

// After the optimizer step of a --dtype fp8 run: delayed scaling's amaxes agree over the world
// (each the max over ranks, Transformer Engine's amax reduction: the dp replicas cast the
// same way, the tp ranks' shards make up one tensor, and every rank holds the histories of every layer, the other stages' too, which
// is what a checkpoint saves and any layout resumes), then the scalers update.
Json Trainer::end_fp8_step() {
  if (grid_ && config_.fp8->recipe == fp8::Recipe::kDelayed) {
    const std::vector<float> pending = fp8_->pending_amaxes();
    Tensor t = Tensor::from_floats(pending, {static_cast<std::int64_t>(pending.size())});
    grid_->world().all_reduce(t, ReduceOp::kMax);
    fp8_->set_pending_amaxes(t.to_floats());
  }
  return fp8_step_json(fp8_->end_step(), *config_.fp8);
}

// The step, as the strategies the factory built run it: the schedule's micro-batches, the
// gradient sync, the global loss, the optimizer, then the step's accounts.
StepStats Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepStats s;
  s.step = step_ + 1;
  s.loss_scale = optimizer_.loss_scale();
  const std::uint64_t bytes_before = bytes_sent_so_far();
  const GroupBytes groups_before = group_bytes_so_far();
  const CommTimes clock_before = comm_clock_now();
  const std::map<std::string, TrafficTotals> pp_ops_before = pp_ops_now();
  const ScheduleResult r = run_micro_batches(s.loss_scale);
  // The schedule's compute spans hold the collectives its forwards and backwards call (tp, cp,
  // ZeRO-3's gathers); its pipeline transfers are spans of their own. Compute is without them.
  const CommTimes in_schedule = comm_clock_now().since(clock_before);
  const double layer_comm_s = in_schedule.owner_total() - in_schedule.group("pp").owner_s;
  synchronise_gradients();
  times_.compute_s += std::max(0.0, r.compute_s - layer_comm_s);
  s.data_position = r.position;  // the first replica's rows start the global window
  s.epoch = r.epoch;
  s.loss = global_loss(r);
  step_optimizer(s);
  close_step_accounts(s, bytes_before, groups_before, clock_before, pp_ops_before);
  ++step_;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

ScheduleResult Trainer::run_micro_batches(float loss_scale) {
  sync_->begin_step();
  if (fp8_) fp8_->begin_step();
  // Context parallel: this rank's rows of the replica's sequences (their true positions).
  const std::vector<std::int64_t> rows =
      cp_attention_ ? cp_attention_->positions(config_.seq / config_.cp)
                    : std::vector<std::int64_t>();
  if (moe_) {
    moe_->begin_step(backward_seed(*sync_, loss_scale, schedule_->micro_batches()),
                     sync_->averages());
  }
  return schedule_->run_step(
      model_, [&] { return rows.empty() ? loader_.next() : cp_rows(loader_.next(), rows); },
      *sync_, loss_scale, rank(), spans_);
}

void Trainer::synchronise_gradients() {
  const double w0 = trace_now_us();
  const CommTimes clock0 = comm_clock_now();
  const double waited = sync_->finish();  // every gradient of this rank synchronised
  // Of finish()'s wall time, what its own calls on this thread did not take: the wait for the
  // communication thread (whose calls the clock counts as not this thread's).
  sync_wait_s_ = std::max(0.0, (trace_now_us() - w0) * 1e-6 -
                                   comm_clock_now().since(clock0).owner_total());
  if (moe_) {
    // The MoE blocks' gradients divided as the dense ones (moe_blocks.h): the cp ranks' sum
    // by cp in any case (ch06 cp_grad_sync.h), the replicas' by dp x m when the sync averages.
    const double cp = grid_ ? double(grid_->shape().cp) : 1.0;
    const double dense = grid_ ? double(grid_->shape().dp) * cp : 1.0;
    moe_->sync_grads(sync_->averages() ? dense * schedule_->micro_batches() : cp);
  }
  // What the schedule still combines across its stages (a pipeline's tied wte copies, unless
  // the factory left them to the sync: strategy_factory.cpp).
  schedule_->after_sync(model_);
  if (grid_) spans_.push_back({"wait for gradients", "exposed", rank(), 0, w0, waited * 1e6});
}

CommTimes Trainer::comm_clock_now() const { return grid_ ? grid_->clock().snapshot() : CommTimes{}; }

std::map<std::string, TrafficTotals> Trainer::pp_ops_now() const {
  if (!pipelined()) return {};
  return grid_->pp().traffic().by_op();
}

double Trainer::global_loss(const ScheduleResult& r) {
  // The logged loss is the global batch's: the same number on every rank.
  const double loss = reductions_.loss(r.loss_sum / static_cast<double>(config_.grad_accum));
  // Without a scaler to skip it (fp32, bf16), a non-finite loss would turn every weight into
  // NaN: halt before the optimizer steps (the global loss: every rank halts here together).
  if (!std::isfinite(loss) && optimizer_.scaler().mode() == ch02::ScaleMode::kNone) {
    halt_on_non_finite_loss(loss);
  }
  return loss;
}

void Trainer::step_optimizer(StepStats& s) {
  s.lr = config_.schedule.at(step_);
  const ch03::StepReport rep = optimizer_step(s.lr);
  if (fp8_) s.fp8 = end_fp8_step();
  if (moe_) {
    s.moe = moe_->step_stats();
    moe_->after_step(rep.taken);
  }
  s.skipped = !rep.taken;
  s.grad_norm = rep.grad_norm;
  s.clip_coef = rep.clip_coef;
}

void Trainer::close_step_accounts(StepStats& s, std::uint64_t bytes_before,
                                  const GroupBytes& groups_before, const CommTimes& clock_before,
                                  const std::map<std::string, TrafficTotals>& pp_ops_before) {
  s.tokens = config_.tokens_per_step();
  if (grid_) {
    s.ranks = world();
    // The reductions' and the sync's own clocks time calls the grid's clock times too (every
    // group of theirs is the grid's): drained, and the grid's clock read instead.
    StepTimes drained;
    reductions_.add_times_to(drained);
    (void)sync_->take_comm_seconds();
    std::map<std::string, TrafficTotals> pp_ops = pp_ops_now();
    for (const auto& [op, t] : pp_ops_before) {
      TrafficTotals& now = pp_ops[op];
      now.calls -= t.calls;
      now.bytes_sent -= t.bytes_sent;
      now.bytes_received -= t.bytes_received;
    }
    s.group_times = step_group_times(comm_clock_now().since(clock_before),
                                     std::exchange(sync_wait_s_, 0.0), pp_ops);
    for (const GroupTime& g : s.group_times) {
      times_.comm_s += g.busy_s;
      times_.exposed_s += g.exposed_s;
    }
    s.times = std::exchange(times_, {});
  } else {
    times_ = {};
  }
  step_bytes_sent_ = bytes_sent_so_far() - bytes_before;
  s.group_bytes = group_bytes_so_far().since(groups_before);
  // MoE blocks: the routed FLOPs, dropped assignments doing no expert work (model_flops.h).
  s.flops = process_flops_per_step(config_, rank_params(model_), kept_fractions(s.moe));
}

}  // namespace mixpar::ch08
