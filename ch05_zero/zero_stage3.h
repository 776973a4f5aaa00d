// ZeRO stage 3: the parameters sharded too (Rajbhandari et al. 2020, section 5.3; docs/
// REFERENCE.md, ZeRO). Stage 2's gradient shards and optimizer shards, and between uses each
// rank holds only its shard of the working copy (the 16-bit or fp32 parameters): eP'/N bytes.
//
//   buckets    one per unit the model announces (BlockParamHook, common/model/gpt.h): each
//              block's 12 parameters, ln_f, and wte with wpe; each bucket padded and split as
//              stage 1 splits it (zero_partition.h), so a rank's parameter shard, gradient
//              shard and optimizer pieces are the same elements
//   forward    before a unit: its buckets all-gathered over the dp group into their own
//              buffers (Storage::restore, the ledger charged), the registry's entries being
//              views of them; after it: released (Storage::release, the ledger credited)
//   backward   the same before each block's backward and the head's; stage 2's reduce-scatter
//              of each unit as soon as its gradients are final (the last micro-batch's)
//   the step   the optimizer steps this rank's shard of the parameters in place: nothing is
//              gathered after it (the next forward gathers block by block)
//
// The gathers and the reduce-scatters run on one communication thread of ZeRO-3's own, in the
// order the compute thread queues them (its program order, the same on every rank), the
// gathers over a communicator split from dp, the reduce-scatters over dp: one thread of a rank
// talks at a time, as the local backend's one-call-per-rank bookkeeping needs (so over tp
// shards, whose blocks call the tp group on the compute thread, the jobs run on the compute
// thread itself, in the same order, with no prefetch). prefetch N: before unit u computes, the gathers of the next N units of the same pass
// are started, so they run under u's compute (DeepSpeed's prefetch bucket, PyTorch FSDP's
// forward/backward prefetch). The passes' orders are the model's (forward: embedding, blocks
// 0 .. L-1, head; backward: head, L-1 .. 0); a unit asked for out of that order is an error
// naming the expected and the actual unit, raised once the gathers in flight are back, so no
// rank waits for a gather another rank will never issue.
//
// Bit-identical to stage 2, hence to DDP: a gathered bucket holds exactly the shards the
// ranks' optimizers wrote, which are DDP's values at those elements.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ch05_zero/zero_sync.h"
#include "model/gpt.h"

namespace mixpar::ch05 {

struct Zero3Options {
  // Units gathered ahead of the one computing (0: each gather started when its unit is needed
  // and waited for at once, nothing under compute).
  int prefetch = 1;
  // The head's unit gathers the tied wte with ln_f. false: the mistake of a unit list that
  // forgets a shared parameter (DeepSpeed's "external parameters"): the head reads the
  // released wte, a named error.
  bool head_gathers_wte = true;
  // Empty: the model's own orders. Otherwise the order the prefetcher assumes for the
  // backward pass (the prefetch-order failure mode gives the forward's here).
  std::vector<std::int64_t> backward_order;
  // dp is a dup of the replicas' group (Communicator::dup) that no other thread of the rank
  // calls while a step runs: the gathers and reduce-scatters may then run on this sync's own
  // thread even where the model's blocks talk to other groups on the compute thread (tp, cp,
  // MoE), as they do on a pure data-parallel layout.
  bool dp_is_a_dup = false;
};

class ZeroStage3 final : public ZeroStage2, public BlockParamHook {
 public:
  // model: this rank's whole model (one pipeline stage of one; under tp its tp shard),
  // allocated, its weights the replicas' (sync_initial_weights before; under tp the replicas
  // are the ranks of its tp rank's dp group). Collective over dp: the gather communicator
  // is split from it. The model's entries are pointed at the gathered buffers, its full working
  // copy released, and this object installed as its block hook (removed by the destructor).
  ZeroStage3(Communicator& dp, GptModel& model, ZeroConfig config, Zero3Options options = {});
  ~ZeroStage3() override;

  std::string describe() const override;
  int sharding_stage() const override { return 3; }
  void begin_step() override;
  void last_backward_starts(int micro_batches) override;
  void grad_ready(std::size_t entry) override;
  // Every reduce-scatter done, the full gradient buffer released; returns the seconds the
  // compute thread waited for gradients and for parameter gathers in this step (the exposed
  // communication).
  double finish() override;
  double take_comm_seconds() override;
  std::vector<TraceSpan> take_spans() override;
  std::uint64_t own_bytes_sent() const override {
    return gather_comm_->traffic().total().bytes_sent;
  }
  // This rank's shard of the working copy, at its pieces: what the optimizer steps in place.
  std::vector<Tensor> shard_params() const override;
  void gather_params() override {}  // the next forward gathers what it reads

  void before_block(std::int64_t block, Phase phase) override;
  void after_block(std::int64_t block, Phase phase) override;

  // This rank's shard of the working copy, bucket by bucket (padding included).
  const Tensor& param_shard() const { return param_shard_; }
  // The buckets (partition().buckets() indices) a unit gathers.
  const std::vector<std::size_t>& unit_buckets(std::int64_t block) const;
  // Bytes of gathered parameter buffers resident now (0 between passes).
  std::size_t gathered_bytes() const;
  // The parameter gathers' communicator (its traffic is the all-gathers' bytes).
  const Communicator& gather_comm() const { return *gather_comm_; }
  // Collective over dp: every bucket gathered into `flat` (the registry's layout, P elements
  // of the working dtype), e.g. to hash the whole model. Not during a pass.
  void gather_full(Tensor& flat);
  int prefetch() const { return options_.prefetch; }
  // Units whose gathers a prefetch started before they were asked for, since construction.
  std::int64_t prefetched_units() const { return prefetched_; }
  // Buckets whose reduce-scatter was queued while the last step's backward still ran.
  std::size_t reduced_during_backward() const { return reduced_during_backward_; }

 private:
  struct BucketState {
    Tensor gathered;  // padded elements, kParameters; released between uses
    int holders = 0;  // units that acquired it and have not released it
    bool done = true;  // its gather has finished (guarded by mu_)
    std::string what;  // the released storage's name
  };
  std::size_t unit_index(std::int64_t block) const;
  std::string unit_name(std::int64_t block) const;
  void acquire(std::int64_t block);  // restore and queue the gathers of a unit's buckets
  void release_unit(std::int64_t block);
  // The constructor's steps, in order.
  void map_units(std::int64_t n_layer);
  void count_entries_per_bucket();
  void take_param_shard();
  void make_gathered_buckets();
  void wait_unit(std::int64_t block);
  void drain();  // waits until every queued gather has finished
  void gather_bucket(std::size_t b);
  void reduce_bucket(std::size_t b);
  void queue_complete_buckets();  // reduce-scatters of the complete buckets, in bucket order
  void thread_main();
  void run_queued_here();  // under tp: the queue's jobs on the compute thread
  void run_front(std::unique_lock<std::mutex>& lock);

  GptModel& model_;
  Zero3Options options_;
  std::unique_ptr<Communicator> gather_comm_;
  Tensor param_shard_;
  std::vector<BucketState> state_;
  std::vector<std::vector<std::size_t>> units_;  // by unit_index: its buckets
  std::vector<std::int64_t> order_[2];           // by phase: the units in execution order
  int phase_ = -1;
  std::size_t pos_ = 0;            // the next unit's position in order_[phase_]
  std::vector<bool> acquired_;     // by unit_index: acquired by a prefetch or its own call
  std::deque<std::int64_t> ahead_;  // units prefetched, in the order they must be asked for
  double waited_s_ = 0;            // the compute thread's waits for gathers, this step
  std::int64_t prefetched_ = 0;
  std::vector<TraceSpan> wait_spans_;
  MemoryLedger* ledger_;

  std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    bool reduce = false;  // reduce-scatter the bucket's gradients; else gather its parameters
    std::size_t bucket = 0;
  };
  std::deque<Job> queue_;  // in the order every rank issues them
  // The last backward's reduce-scatters (compute thread only, but divisor_ read by the thread
  // once queued).
  bool open_grads_ = false;
  double divisor_ = 1.0;
  std::vector<std::size_t> bucket_of_;  // by registry entry
  std::vector<int> pending_;            // by bucket: entries not yet final
  std::vector<bool> marked_;            // by entry
  std::size_t next_reduce_ = 0;         // buckets [0, next_reduce_) are queued
  std::size_t reduced_during_backward_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  double comm_seconds_ = 0;
  std::vector<TraceSpan> spans_;
  bool on_compute_thread_ = false;  // tp: the jobs run on the compute thread, no thread_
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace mixpar::ch05
