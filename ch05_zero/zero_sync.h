// ZeRO stage 1 as the trainer's GradSync (Rajbhandari et al. 2020, "ZeRO: memory optimizations
// toward training trillion parameter models"; docs/REFERENCE.md, ZeRO). The dp replicas keep
// the whole 16-bit model but each steps only its shard of the FP32 masters and Adam moments:
//
//   backward      chapter 4's buckets leave as they become final, but each is REDUCE-SCATTERED
//                 (zero_partition.h): rank r receives the mean of its shard only, (N-1)/N of
//                 the bucket sent instead of the all-reduce's 2(N-1)/N;
//   optimizer     chapter 3's MixedPrecisionOptimizer over this rank's pieces (shard_params,
//                 shard_grads): unscale, inf check, clip and AdamW on 1/N of the parameters;
//   after a step  every rank's updated shard ALL-GATHERED into every replica's working copy,
//                 (N-1)/N of the parameters: 2P(N-1)/N per step in all, DDP's volume.
//
// Bit-identical to DDP on the same ranks: every element is summed rank 0 .. N-1 in FP32 by
// reduce_scatter as by all_reduce (communicator.h), divided by the same N x micro-batches and
// rounded to the working dtype the same way; AdamW is elementwise; and the gradient norm is
// summed in the very order one device sums it (counted_sum_of_squares: a chain along the
// shards), so the clip coefficient, and everything after it, has the same bits.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ch04_ddp/bucket_reducer.h"
#include "ch05_zero/zero_partition.h"
#include "comm/communicator.h"
#include "model/gpt_params.h"
#include "parallel/grad_sync.h"

namespace mixpar::ch05 {

struct ZeroConfig {
  std::size_t bucket_cap_bytes = std::size_t{25} << 20;
  std::int64_t align = 1;  // each bucket padded to a multiple of dp x align elements
  bool overlap = true;     // reduce-scatter on a communication thread during backward
  // Extra bucket boundaries (ch04::make_buckets): ZeRO-3 closes a bucket after each block so
  // that a bucket is the unit it gathers. Empty: the cap alone.
  std::function<bool(std::size_t entry)> close_after;
};

class ZeroStage1 : public GradSync {
 public:
  // dp: the replicas' communicator; registry: this rank's model (allocated). The
  // communication thread uses dp between last_backward_starts() and finish() only.
  ZeroStage1(Communicator& dp, ParamRegistry& registry, ZeroConfig config);

  std::string describe() const override;
  bool averages() const override { return true; }
  void begin_step() override {}
  void last_backward_starts(int micro_batches) override;
  void grad_ready(std::size_t entry) override;
  double finish() override;
  double take_comm_seconds() override;
  std::vector<TraceSpan> take_spans() override;
  // Stages 1 and 2 talk over dp only (ZeRO-3 adds its gather group).
  std::uint64_t own_bytes_sent() const override { return 0; }

  const ZeroPartition& partition() const { return partition_; }
  // Buckets whose reduce-scatter was handed to the communication thread while the last
  // backward still ran (chapter 4's overlap), in the last step.
  std::size_t buckets_sent_during_backward() const { return reducer_->ready_before_finish(); }
  // Views of the working copy and of the (reduced) gradients at this rank's pieces, in order:
  // what the optimizer is built on. Its masters and moments are then 1/N of the model's.
  virtual std::vector<Tensor> shard_params() const;
  virtual std::vector<Tensor> shard_grads() const;
  // Per piece: its parameter's weight-decay flag.
  std::vector<bool> shard_weight_decay() const;

  // Collective over dp: the sum of squares of the counted entries' gradients, each entry
  // folded element by element in flat order and the entries added in registry order, exactly
  // as counted_sum_of_squares sums a whole model on one device. grads32: this rank's FP32
  // shard gradients, one per piece. The running sums travel along the owners (a chain of
  // 16-byte messages); the total is returned on the last owner and 0 elsewhere, so the
  // world's sum (StepReductions::grad_norm) is the total, unchanged.
  double counted_sum_of_squares(std::span<const Tensor> grads32,
                                const std::vector<bool>& counted) const override;
  // This rank's shard sum alone, with no other rank's: the local-norm clipping mistake.
  double local_sum_of_squares(std::span<const Tensor> grads32,
                              const std::vector<bool>& counted) const;
  // Collective over dp: every rank's shard of the working copy all-gathered into every
  // replica, bucket by bucket (after the optimizer stepped).
  // ZeRO-3 gathers block by block before each use instead: nothing to do after its step.
  void gather_params() override;

  // GradSync's ownership, answered with this rank's shard: its pieces are the partition's,
  // its optimizer tensors the shard_* views, every dp rank counts the norm of its own pieces
  // (the dp coordinate no longer decides who counts), and whole tensors come back from the
  // pieces by one sum over dp (each element has exactly one owner).
  int sharding_stage() const override { return 1; }
  std::vector<OwnedPiece> owned_pieces(const ParamRegistry& params) const override;
  std::vector<Tensor> owned_params(ParamRegistry&) const override { return shard_params(); }
  std::vector<Tensor> owned_grads(ParamRegistry&) const override { return shard_grads(); }
  std::vector<bool> owned_weight_decay(const ParamRegistry&) const override {
    return shard_weight_decay();
  }
  std::vector<bool> norm_counted(const ParamRegistry& params, const GridCoord& at) const override;
  std::vector<Tensor> whole_params(const ParamRegistry& params,
                                   std::span<const Tensor> owned) const override;

 protected:
  // stage2: each bucket's FP32 staging and ZeRO's own reduce-scatter and all-gather scratch
  // exist only while a collective uses them (released between, Storage::release).
  ZeroStage1(Communicator& dp, ParamRegistry& registry, ZeroConfig config, bool stage2);
  // Where bucket b's mean over the dp ranks (this rank's n owned elements, FP32 or the
  // gradients' dtype) is kept. Stage 1: over the owned range of `work`, which the reducer
  // rounds back into the registry's gradients.
  virtual void keep_mean(std::size_t b, const Tensor& mean, Tensor& work);
  // Bucket b's reduce-scatter over dp from `work` (its gradients, FP32 for 16-bit ones), the
  // mean kept by keep_mean (ZeRO-3 calls it from its own communication thread).
  void reduce_scatter_bucket(std::size_t b, Tensor& work, double divisor);

 private:
  void reduce_scatter_into_shard(std::size_t b, Tensor& work, double divisor);

 protected:
  Communicator& dp_;
  ParamRegistry& registry_;
  ZeroConfig config_;
  ZeroPartition partition_;
  Tensor rs_in_, rs_out_;  // reduce-scatter scratch (FP32 or the gradients' dtype)
  Tensor ag_in_, ag_out_;  // all-gather scratch in the working dtype
  bool release_scratch_ = false;
  std::unique_ptr<ch04::BucketReducer> reducer_;
  bool open_ = false;
};

// ZeRO stage 2: stage 1 with the gradients sharded too. Each bucket's reduce-scatter leaves
// this rank's mean in its own gradient shard (kGradients, one padded shard per bucket: P'/N
// elements), rounded into the working dtype exactly where stage 1 rounds it; the registry's
// full-size gradient buffer is released once the last bucket has left (finish) and comes
// back, zeroed, before the next step's first backward (begin_step), and chapter 4's FP32
// staging and the reduce-scatter and all-gather scratch exist only while in use. Between steps a rank holds 2P (parameters)
// + 2P'/N (its gradient shard) + 4o (the FP32 copy unscaling needs) + 12o (masters and
// moments): the paper's (2 + 14/N)P plus padding and the FP32 gradient copy.
//
// The micro-batches of a step accumulate into the full buffer and it is reduced once, after
// the last one (DeepSpeed reduces each micro-batch into the shard instead, which needs no
// full buffer but adds in another order): so the bits are DDP's, and the full 16-bit
// gradient is on the ledger from the step's first backward until its last bucket leaves.
class ZeroStage2 : public ZeroStage1 {
 public:
  ZeroStage2(Communicator& dp, ParamRegistry& registry, ZeroConfig config);

  std::string describe() const override;
  int sharding_stage() const override { return 2; }
  void begin_step() override;
  double finish() override;
  std::vector<Tensor> shard_grads() const override;
  // This rank's gradient shard: bucket by bucket, each bucket's padded shard.
  const Tensor& grad_shard() const { return grad_shard_; }

 protected:
  // By bucket: its shard's first element in grad_shard() (ZeRO-3's parameter shard too).
  const std::vector<std::int64_t>& shard_offsets() const { return shard_offset_; }
  // The partition's pieces (parameter by parameter) as slices of a tensor laid out like
  // grad_shard(): this rank's gradients here, ZeRO-3's parameter shard there.
  std::vector<Tensor> piece_slices(const Tensor& shard) const;
  void release_full_grads();  // the registry's full gradient buffer, between steps

 private:
  void keep_mean(std::size_t b, const Tensor& mean, Tensor& work) override;

  Tensor grad_shard_;
  std::vector<std::int64_t> shard_offset_;  // by bucket: its shard's first element
};

}  // namespace mixpar::ch05
