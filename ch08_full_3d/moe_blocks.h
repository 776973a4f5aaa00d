// Chapter 9's MoE layer in train_gpt's blocks: every moe_every-th block runs a ch09::MoeLayer
// in place of its MLP, through the model's feed-forward seam (common/model/
// block_feed_forward.h). This rank holds the router of each MoE block whole and its ep
// rank's share of the experts, by global index (ch09_expert_parallel/experts.h); the tensors
// live here, outside the GPT-2 registry, and the trainer hands them to the same optimizer
// step as the dense ones.
//
// The groups (ch09_expert_parallel/expert_mesh.h): the tokens travel over ep; the router's
// gradient is a dense one, summed over dp x cp; an expert's over edp, the ranks holding the
// same experts. Both are then divided like the dense gradients (by dp x cp x micro-batches
// when the sync averages, by cp alone otherwise, as context parallelism's sum is): an
// expert's sum over edp already holds every ep rank's tokens routed to it, so its mean over
// the replicas divides by dp x cp, not by edp. Context parallelism's ranks route their own
// rows: the layer is token-wise, and the statistics are reduced over dp x cp.
//
// The balance statistics (f, P, the expert-bias counts) are reduced over dp x cp, so every
// replica routes with the same bias and the aux loss is the global batch's (one device's).
// Each rank differentiates its own tokens with the group's T (ch09 load_balance.h), so the
// group's gradients sum to the loss's gradient; the averaging sync divides that sum by
// dp x cp, which the aux seed multiplies back (aux_loss_scale.h's rule: the main loss's
// factors, loss scale and micro-batches, and nothing for tp).
//
// Beside tp every tp rank of a place runs the same layer on the same tokens (the blocks' ln_2
// output is whole there), so the MoE tensors are replicated over tp and tp rank 0 counts them.
// Under ZeRO-1/2 the experts' AdamW states are sharded over edp (each edp rank steps a flat
// range of each expert tensor, the ranges all-gathered after the step), the routers' are not.
// Under ZeRO-3 the experts' parameters and gradients are sharded too, as chapter 5's stage 3
// shards the registry's over dp: between uses a rank holds only its range of each expert
// tensor (a tensor of its own, which the optimizer steps in place), the whole tensors are
// gathered over edp before each MoE block's forward and backward and released after, and
// the gradients, whole during the step's backwards, are reduce-scattered over edp into the
// ranges and released. The ledger sees the releases (Storage::release), as chapter 5's does.
//
// The order of the collectives. A rank of an edp group is in another ep group than its edp
// peers, and the local backend keeps one call per rank, so every rank must issue the same
// sequence of collectives or two of them wait on each other in different groups. All of them
// run on the compute thread in the model's program order, which is every rank's: per MoE
// block's forward, the block's dense ZeRO-3 gather (chapter 5's, put on the compute thread
// beside a feed-forward seam), the experts' four edp gathers, the balance all-reduce over
// dp x cp, then the ep exchange (counts, then tokens, out and back); its backward the same
// gathers, then the ep exchange; after the backwards the routers' all-reduces and the
// experts' reduce-scatters, block by block. Nothing is prefetched on another thread.
//
// Beside a pipeline (chapter 7) each rank holds the MoE blocks of its own stages (its chunks'),
// and the groups above are its stage's: the dp x cp ranks of the same stage and tp rank. Each
// layer keeps every micro-batch's forward state under the model's slot until that
// micro-batch's backward (block_feed_forward.h), so any schedule's order of forwards and
// backwards gives one device's gradients; a block is counted in the norm and written to a
// checkpoint by its stage alone, and the statistics and the evaluation copy gather every
// stage's blocks over pp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ch09_expert_parallel/expert_mesh.h"
#include "ch09_expert_parallel/moe_layer.h"
#include "comm/communicator.h"
#include "comm/device_mesh.h"
#include "comm/timed_communicator.h"
#include "model/block_feed_forward.h"
#include "trainer_config.h"
#include "util/json.h"

namespace mixpar::ch08 {

class MoeBlocks final : public FeedForwardSeam {
 public:
  // Collective over world when distributed (the expert groups are split from it); world null:
  // one device, every expert here. c must have passed validate() with c.uses_moe().
  // model_blocks: the blocks this rank's model (its chunks) runs, every block unless a
  // pipeline (chapter 7) gives this rank some only: it holds the MoE blocks among them.
  // clock (optional): the grid's, which then times the expert groups' calls as "ep", "edp",
  // "dp.moe" (dp x cp) and "pp.moe" (comm/timed_communicator.h; the log counts the last two
  // as dp's and pp's).
  MoeBlocks(const TrainerConfig& c, Communicator* world, const DeviceMesh* mesh,
            const std::vector<std::int64_t>& model_blocks, CommClock* clock = nullptr);
  // An evaluation copy: one rank, every block, every expert, no communicator
  // (gather_for_eval fills it).
  explicit MoeBlocks(const TrainerConfig& c);
  ~MoeBlocks() override;

  BlockFeedForward* at(std::int64_t layer) override;
  // Block `layer` is an MoE block: layers moe_every - 1, 2 moe_every - 1, ...
  static bool is_moe_block(const TrainerConfig& c, std::int64_t layer);

  // Before a step's micro-batches: the aux and z-loss seeds of their backwards, from the
  // seed of the main loss's backward (common/parallel/grad_sync.h's backward_seed) and
  // whether the sync averages over dp x cp.
  void begin_step(float backward_seed, bool sync_averages);
  // This rank's tensors, in the optimizer's order: per MoE block the router weight, then
  // the experts' c_fc weight and bias, c_proj weight and bias. Their gradients in the same
  // order, and whether AdamW decays each (2-D weights only, as the dense ones). Under ZeRO
  // (zero_stage >= 1) with edp > 1 the experts' optimizer states are sharded over edp, as
  // ZeRO-1 shards the dense ones over dp: params() and grads() are then this edp rank's flat
  // range of each expert tensor (owned_range), which alone it steps; gather_sharded() makes
  // the experts whole again after the step. whole_params() are the tensors themselves.
  // Under ZeRO-3 params() and grads() of an expert tensor are the range's own tensors, and
  // whole_params() are released outside gather_whole() .. release_whole().
  std::vector<Tensor> params();
  std::vector<Tensor> grads();
  std::vector<Tensor> whole_params();
  bool shards_experts() const { return shard_; }
  bool shards_expert_params() const { return stage3_; }  // ZeRO-3 over edp > 1
  // Collective over edp under ZeRO-3 (else nothing): every MoE block's experts whole
  // (checkpoints, evaluation), then released again.
  void gather_whole();
  void release_whole();
  // [begin, begin + count) of tensor j's flat elements this rank steps (all of a router, or
  // unsharded).
  std::pair<std::int64_t, std::int64_t> owned_range(std::size_t j) const;
  // Collective over edp: every edp rank's range of each expert tensor gathered into it.
  void gather_sharded();
  // Collective over edp: a tensor of tensor j's owned range (a moment) made whole, shaped as
  // this rank's tensor j; a copy of it when unsharded.
  Tensor gather_over_edp(const Tensor& range, std::size_t j) const;
  std::vector<bool> weight_decay() const;
  // Of grads() (FP32, this order): the squares this rank counts in the global norm, every
  // element once over the world: the router on dp x cp rank 0, an expert on edp rank 0.
  double counted_sum_of_squares(std::span<const Tensor> grads) const;
  // After the step's backwards: the router's gradients summed over dp x cp, the experts' over
  // edp, each divided by `divisor` (dp x cp x micro-batches when the sync averages, else cp).
  void sync_grads(double divisor);
  // After an optimizer step that was taken: DeepSeek-V3's bias update from the step's counts
  // (reduced over dp x cp), then the step's statistics reset.
  void after_step(bool taken);
  // The step's statistics, collective over dp x cp, ep and pp: "blocks", one object per MoE
  // block of the model, from the stage holding it (per-expert token counts of the global
  // batch before drops, dropped fraction, max / mean of the rows each ep rank's experts ran,
  // the aux and z losses); "a2a_bytes", what this rank sent over ep in the step's
  // micro-batches (measured by the communicator), and "a2a_bytes_formula", the same by the
  // formula of the all-to-all dispatch (each row to or from another ep rank crosses four
  // times: dispatch and return, forward and backward, C FP32 values; plus El FP64 counts per
  // other rank per forward), null for all-gather. With a pipeline both are summed over the
  // rank's pp group (every stage's MoE blocks).
  Json step_stats();
  // Bytes this rank sent over the ep, edp, dense and pp groups so far (the trainer's by-group
  // log).
  std::uint64_t ep_bytes_sent() const;
  std::uint64_t edp_bytes_sent() const;
  std::uint64_t dense_bytes_sent() const;
  std::uint64_t pp_bytes_sent() const;  // the statistics and evaluation gathers over pp
  // Collective over ep and pp: every expert of every MoE block of the model gathered into
  // `into` (an evaluation copy), with the router weights and biases; into may be null on
  // ranks that keep none.
  void gather_for_eval(MoeBlocks* into);

  // Checkpoints (chapter 8's pieces): the global name of this rank's tensor j of params(),
  // "h.<block>.moe.router.weight" or "h.<block>.moe.experts.c_fc.weight" ..., and its global
  // shape (the experts' [E, ...], every expert by global index); the block of tensor j's
  // expert bias, "h.<block>.moe.expert_bias" [E]. An expert tensor of this rank holds rows
  // [first, first + El) of the global one.
  std::string key(std::size_t j) const;
  Shape global_shape(std::size_t j) const;
  bool is_expert_tensor(std::size_t j) const { return j % 5 != 0; }
  int first_expert() const;
  std::int64_t local_shape_numel(std::size_t j) const;  // elements of this rank's tensor j
  std::string bias_key(std::size_t block) const;
  // Collective over ep: every rank's rows of an expert tensor of this rank (t's shape, dim 0
  // El), gathered in global order into a new [E, ...] tensor; t itself when ep is 1.
  Tensor gather_experts(const Tensor& t) const;

  int ep() const { return groups_.ep ? groups_.ep->size() : 1; }
  std::size_t blocks() const { return layers_.size(); }
  ch09::MoeLayer& layer(std::size_t i);

 private:
  class Branch;
  // ZeRO-3 over edp (no-ops otherwise): the ranges taken at construction; block i's experts
  // gathered and released; its whole gradients restored (zeros) at the step's first backward;
  // the gradients reduce-scattered after the backwards.
  void take_expert_shards();
  void gather_block(std::size_t i);
  void release_block(std::size_t i);
  void restore_block_grads(std::size_t i);
  void reduce_scatter_grads(double divisor);
  std::vector<Tensor> whole_grads();
  TrainerConfig config_;
  ch09::ExpertGroups groups_;
  std::vector<std::unique_ptr<Branch>> layers_;  // by MoE block, in model order
  std::vector<std::int64_t> layer_of_;           // model block of each
  std::unique_ptr<Communicator> pp_;             // this rank's pipeline (null: pp 1)
  // Every MoE block of the model, in model order, and the pp rank holding it.
  std::vector<std::pair<std::int64_t, int>> owners_;
  void find_owners();  // collective over pp
  bool count_router_ = true, count_experts_ = true;
  bool shard_ = false;  // the experts' optimizer states sharded over edp (ZeRO)
  bool stage3_ = false;  // and their parameters and gradients (ZeRO-3)
  std::vector<Tensor> shards_, grad_shards_;  // ZeRO-3: by tensor j, the owned ranges
  std::uint64_t ep_bytes_at_step_ = 0;  // ep_bytes_sent() when the step began
};

}  // namespace mixpar::ch08
