// The trainer: a GptModel (this rank's stage) in the working dtype, chapter 3's mixed-precision
// AdamW (FP32 masters, chapter 2's loss scaler for fp16, chapter 3's FP8 GEMMs for fp8), the
// token loader and the LR schedule. Given a world communicator it is one rank of a mesh of
// named dimensions, [pp, dp, cp, tp] (common/comm/device_mesh.h; its communicators:
// parallel_grid.h), and composes the strategies of common/parallel: a GradSync over the
// gradient group (chapter 4's bucketed all-reduce or chapter 5's ZeRO, under chapter 6's cp
// rule when cp > 1), the per-step reductions (loss, found-inf, the count-once gradient norm)
// and a Schedule that runs the step's micro-batches (SingleStage or chapter 7's pipeline),
// each chosen by strategy_factory.h and asked, never cast. One call of train_step() is one
// optimizer step over grad_accum micro-batches.
// Checkpoints hold everything that changes while training, so a resumed run continues bit for
// bit.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "checkpoint_pieces.h"
#include "comm_times.h"
#include "comm/communicator.h"
#include "comm/parallel_grid.h"
#include "async_checkpoint.h"
#include "io/token_loader.h"
#include "model/gpt.h"
#include "moe_blocks.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "parallel/step_reductions.h"
#include "tensor/ledger.h"
#include "trace/chrome_trace.h"
#include "trainer_config.h"
#include "training_data.h"

namespace mixpar::ch08 {

// Bytes a rank sent, by group: "world", then the grid's groups by name in their order
// (ParallelGrid::groups(): dp, tp, pp, model_parallel, embedding, cp), the dp x cp group's
// counted as dp's (the loss mean over dp x cp). The JSONL's comm_bytes_by_group.
struct GroupBytes {
  std::vector<std::pair<std::string, std::uint64_t>> by_group;
  // Adds `bytes` to the group `name`, appended after the others when new.
  void add(const std::string& name, std::uint64_t bytes);
  std::uint64_t total() const;
  // Group by group, this minus `before` (the same groups in the same order).
  GroupBytes since(const GroupBytes& before) const;
};

struct StepStats {
  std::int64_t step = 0;   // 1-based: the step just finished
  double loss = 0.0;       // mean over the step's micro-batches
  double grad_norm = 0.0;  // global L2 norm of the unscaled gradients, before clipping
  double clip_coef = 1.0;
  double lr = 0.0;
  float loss_scale = 1.0f;  // the scale this step's gradients carried
  bool skipped = false;     // inf/NaN: the optimizer did not step
  double seconds = 0.0;     // wall time of the step
  std::int64_t tokens = 0;  // tokens processed by the step, over all replicas
  // Distributed runs only (ranks > 0): this rank's split of the step. compute_s is the
  // forwards and backwards without the collectives they call; comm_s and exposed_s are the
  // sums of group_times' busy and exposed seconds (every group: tp, cp, pp, dp, world, ...).
  int ranks = 0;
  StepTimes times;
  // Where the step's first micro-batch starts in the token stream, and in which epoch: a
  // repeated position within an epoch is the "repeated batches" silent killer of source
  // article B (docs/SOURCES.md).
  std::int64_t data_position = 0, epoch = 0;
  // The step's model FLOPs done in this process (model_flops.h: the whole grid when its ranks
  // are threads of this process, this rank's share under MPI), and their share of the peak of
  // the cores the process computes on (gemm_peak.h; 0 until the train loop sets it).
  double flops = 0, mfu = 0;
  // Distributed: the bytes this rank sent in the step over each of its groups.
  GroupBytes group_bytes;
  // Distributed: the seconds of the step's communication over each of its groups
  // (comm_times.h); times.comm_s and times.exposed_s are their sums.
  std::vector<GroupTime> group_times;
  // --dtype fp8: this rank's casts of the step by role (fp8_step_json); null otherwise.
  Json fp8;
  // --n-experts: each MoE block's step (MoeBlocks::step_stats: per-expert token counts,
  // dropped fraction, max / mean load over the ep ranks, the aux and z losses, the all-to-all
  // bytes by formula); null otherwise.
  Json moe;
};

// Sets the threads of OpenMP loops and Eigen GEMMs (0: leave the default).
void set_cpu_threads(int threads);

// One rank's bill after a step: live bytes by ledger category, the peak of their sum, and the
// bytes it sent during the step over all its communicators (every group of the grid).
struct RankMetrics {
  std::array<std::size_t, kNumMemCategories> mem{};
  std::size_t mem_peak = 0;
  // The ledger's host side (--offload-optimizer; all zero otherwise).
  std::array<std::size_t, kNumMemCategories> host_mem{};
  std::size_t host_mem_peak = 0;
  std::uint64_t comm_bytes_sent = 0;
};

class Trainer {
 public:
  // Builds the grid (with a communicator), the model, the gradient sync, the optimizer and
  // the loader. InputError when the data is shorter than one step's batches.
  // world: this rank's communicator of a config.dp x tp x pp run (collective: every rank
  // constructs its trainer together; the dp replicas start from rank 0's weights or from one
  // seed, checked, as config.init_sync says); null: a single device, no communication at all.
  Trainer(TrainerConfig config, TrainingData data, Communicator* world = nullptr);
  Trainer(const Trainer&) = delete;  // the model's hooks point into this object
  Trainer& operator=(const Trainer&) = delete;

  // Collective when distributed: every rank calls it, and every rank returns the same global
  // loss and gradient norm.
  StepStats train_step();
  // The optimizer half of a step, from the gradients now in the model: the learning rate, then
  // chapter 3's step (weight decay on 2-D weights only). Does not advance step(); train_step()
  // calls it (public so tests can step on gradients they set).
  ch03::StepReport optimizer_step(double lr);
  std::int64_t step() const { return step_; }  // steps finished

  // 0 and 1 on a single device.
  int rank() const { return world_ ? world_->rank() : 0; }
  int world() const { return world_ ? world_->size() : 1; }
  bool distributed() const { return grid_ != nullptr; }
  // pp > 1: this rank holds one stage of the model (chapter 7).
  bool pipelined() const { return grid_ != nullptr && grid_->shape().pp > 1; }
  // The grid and this rank's place in it (null on a single device).
  const ParallelGrid* grid() const { return grid_.get(); }
  // dp's dup, over which the gradient sync's buckets overlap backward beside other groups'
  // calls (strategy_factory.h, make_dp_lane); nullptr where they go over grid()->dp().
  const Communicator* dp_lane() const { return dp_lane_.get(); }
  GridCoord coord() const { return grid_ ? grid_->coord() : GridCoord{}; }
  GridShape shape() const { return grid_ ? grid_->shape() : GridShape{}; }
  const GradSync& grad_sync() const { return *sync_; }
  const Schedule& schedule() const { return *schedule_; }
  // Collective over the dp group: every replica's weights hash compared (ReplicaMismatch
  // naming the ranks). Nothing to compare on a single device.
  void verify_replicas();
  // The compute and communication spans recorded since the last call (distributed only).
  std::vector<TraceSpan> take_spans();
  // Collective over the world: every rank's RankMetrics after the last step, by rank (one
  // entry on a device). Its own traffic is no step's.
  std::vector<RankMetrics> gather_rank_metrics();

  const TrainerConfig& config() const { return config_; }
  const TrainingData& data() const { return data_; }
  GptModel& model() { return model_; }
  // The model rank 0 evaluates, samples and dumps logits with: the trained model itself, or
  // with tp > 1, pp > 1 or ZeRO a whole copy of it that prepare_eval_model() gathers: the
  // FP32 masters over dp (ZeRO's shards), then the tp shards (chapter 6), then the stages
  // (chapter 7) onto rank 0 (collective: every rank calls it at the same points).
  void prepare_eval_model();
  GptModel& eval_model();
  const ch03::MixedPrecisionOptimizer& optimizer() const { return optimizer_; }
  // --dtype fp8: the FP8 GEMMs and their scaling state (null otherwise).
  const fp8::Fp8BlockGemms* fp8_gemms() const { return fp8_.get(); }
  const TokenLoader& loader() const { return loader_; }
  // --n-experts: this rank's MoE blocks (null for a dense model), and rank 0's evaluation
  // copy with every expert (after prepare_eval_model; null elsewhere).
  MoeBlocks* moe() { return moe_.get(); }
  MoeBlocks* eval_moe() { return eval_moe_.get(); }

  // FP32 weights under their HF names: the masters (16-bit runs) or the model itself (fp32).
  std::vector<NamedTensor> master_weights() const;
  // The final model as a Hugging Face directory (FP32 masters: no precision thrown away).
  // With tp > 1, pp > 1 or ZeRO the full, unpadded tensors of the last prepare_eval_model().
  void save_hf(const std::string& dir) const;

  // Collective when distributed: writes a checkpoint of the current step into
  // config.checkpoint_dir (every rank the shards it holds, rank 0 the manifest); returns its
  // path.
  std::string save_checkpoint();
  // --checkpoint-async: this rank's part of the checkpoint of the current step, staged: the
  // tensors it writes copied into host memory (billed to its ledger), rank 0's state and
  // config as text, each file a function the background writer calls (async_checkpoint.h).
  // The files are byte for byte those save_checkpoint writes. Not collective.
  StagedCheckpoint stage_checkpoint();
  // Continues from the latest checkpoint in config.checkpoint_dir, written on this layout or any
  // other (each rank reads the pieces it now holds): InputError if it is corrupt, or was
  // written by a run with another shape, dtype, rows per micro-batch (dp x batch), data or
  // seed. Distributed: every rank reads the checkpoint (a directory all ranks see), then the
  // replicas are checked.
  void resume();

 private:
  // tp > 1, pp > 1 or ZeRO: evaluation and --save need the whole model gathered.
  bool gathers_for_eval() const;
  // Collective over dp under ZeRO: the FP32 masters of this rank's (tp, pp) place, one tensor
  // (held shape) per registry entry.
  std::vector<Tensor> place_masters() const;
  // Collective: every rank throws std::runtime_error naming the step; rank 0's message also
  // names the first layer whose output is not finite (run_watch.h).
  [[noreturn]] void halt_on_non_finite_loss(double loss);
  void load_initial_weights();
  // --init-from on a sharded layout (tp, pp or ZeRO; trainer_state.cpp): each rank reads its
  // own pieces of the Hugging Face tensors into its FP32 masters.
  void load_hf_pieces(const std::string& dir);
  // The working copy from the masters (sharded: this rank's pieces, then gathered over dp).
  void recast_working_copy();
  // The sync splits the training state over dp (GradSync::sharding_stage): the optimizer
  // steps this rank's pieces only.
  bool sharded() const;
  // This rank's model chunks, model_ first (one without --virtual-stages).
  std::vector<GptModel*> model_chunks();
  // This rank's FP32 masters and AdamW moments as pieces of the global tensors, each marked
  // with whether this rank is the one that writes it (checkpoint_pieces.h): what a checkpoint
  // stores and what a resume on any layout fills.
  std::vector<HeldTensor> held_state() const;
  // --n-experts: the MoE blocks' masters, moments and expert biases as pieces of their global
  // tensors (moe_blocks.h's keys): this rank's own rows (what a resume fills), or with
  // moe_whole_ the whole tensors gathered over ep (what a checkpoint writes, once: the dp x cp
  // rank 0 of each ep place). gather_moe_state() (collective over ep) fills moe_whole_.
  std::vector<HeldTensor> moe_held_state() const;
  void gather_moe_state();
  void write_checkpoint_files(const std::string& dir) const;
  // The writers of this rank's checkpoint files (stage_checkpoint), over its own tensors
  // (staged false: for a save that writes them at once) or over copies of them.
  StagedCheckpoint checkpoint_files(bool staged) const;
  // train_step's parts, in its order. The step's micro-batches under the schedule (the sync
  // told when the last backward starts):
  ScheduleResult run_micro_batches(float loss_scale);
  // The sync's finish(), then what the schedule combines after it:
  void synchronise_gradients();
  // The global batch's mean loss (collective); halts on a non-finite one without a scaler:
  double global_loss(const ScheduleResult& r);
  // The learning rate, chapter 3's step, the FP8 scaling state: into s.
  void step_optimizer(StepStats& s);
  // Tokens, times, bytes by group and FLOPs of the step just taken: into s.
  void close_step_accounts(StepStats& s, std::uint64_t bytes_before,
                           const GroupBytes& groups_before, const CommTimes& clock_before,
                           const std::map<std::string, TrafficTotals>& pp_ops_before);
  // The grid's clock now, and the pp group's traffic by operation (empty without a grid / pp).
  CommTimes comm_clock_now() const;
  std::map<std::string, TrafficTotals> pp_ops_now() const;
  Json end_fp8_step();  // --dtype fp8: after the optimizer step (trainer.cpp)
  std::uint64_t bytes_sent_so_far() const;
  GroupBytes group_bytes_so_far() const;

  TrainerConfig config_;
  TrainingData data_;
  Communicator* world_;
  std::unique_ptr<ParallelGrid> grid_;
  // Chapter 6's collectives over the grid's tp group (null unless tp > 1): before the model,
  // which calls them.
  std::unique_ptr<TensorParallelGroup> tp_ops_;
  // Chapter 6, part 2: the model's attention over the grid's cp group (null unless cp > 1),
  // before the model, which calls it; also where this rank's rows of each sequence are.
  std::unique_ptr<AttentionSeam> cp_attention_;
  // tp > 1, pp > 1 or ZeRO, rank 0: the whole model gathered for evaluation, and its FP32
  // masters for --save.
  // --n-experts, rank 0: every expert gathered for evaluation (before the model using it).
  std::unique_ptr<MoeBlocks> eval_moe_;
  std::unique_ptr<GptModel> eval_model_;
  std::vector<NamedTensor> eval_masters_;
  // --virtual-stages v > 1 (chapter 7's interleaved pipeline): the parameters of this rank's v
  // model chunks in one registry (ch07_pipeline/model_chunks.h), before the chunks that are
  // views of it; null otherwise. model_ is chunk 0, chunks_ the others.
  std::unique_ptr<ParamRegistry> chunk_params_;
  // --dtype fp8: the blocks' FP8 GEMMs (chapter 3's last part), before the models that run
  // through them; null otherwise.
  std::unique_ptr<fp8::Fp8BlockGemms> fp8_;
  // --n-experts (chapter 9): the MoE blocks' branches, before the models that run them; null
  // for a dense model. Their tensors follow the registry's in the optimizer.
  std::unique_ptr<MoeBlocks> moe_;
  GptModel model_;
  std::vector<GptModel> chunks_;
  // dp's dup, where the gradient sync's buckets overlap backward beside other groups' calls
  // (strategy_factory.h, make_dp_lane); null otherwise. Before the sync that talks over it.
  std::unique_ptr<Communicator> dp_lane_;
  // Before the optimizer: making the replicas equal must reach the working copy before the
  // optimizer copies it into the FP32 masters.
  std::unique_ptr<GradSync> sync_;
  ch03::MixedPrecisionOptimizer optimizer_;
  StepReductions reductions_;
  std::unique_ptr<Schedule> schedule_;
  std::vector<bool> norm_counted_;  // by registry entry: this rank counts it in the norm
  std::size_t dense_tensors_ = 0;   // the optimizer's tensors before the MoE blocks' own
  // The MoE blocks' state gathered over ep for the checkpoint being written (gather_moe_state):
  // masters, exp_avg, exp_avg_sq of each MoE tensor, then each block's expert bias.
  std::vector<Tensor> moe_whole_;
  TokenLoader loader_;
  std::int64_t step_ = 0;
  StepTimes times_;
  // The compute thread's wait in the sync's finish() outside any call of its own: for the
  // communication other threads run (chapter 4's buckets), dp's exposed time.
  double sync_wait_s_ = 0;
  std::vector<TraceSpan> spans_;
  std::uint64_t step_bytes_sent_ = 0;  // by this rank, over all its groups, in the last step
};

}  // namespace mixpar::ch08
