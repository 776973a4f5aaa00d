#include "ch05_zero/zero_lesson.h"

#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>

#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "ch04_ddp/bucketed_allreduce.h"
#include "ch05_zero/zero_stage3.h"
#include "ch05_zero/zero_sync.h"
#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
#include "model/gpt.h"
#include "parallel/count_once.h"
#include "parallel/replicas.h"
#include "parallel/schedule.h"
#include "parallel/step_reductions.h"
#include "random/philox.h"
#include "util/errors.h"

namespace mixpar::ch05 {
namespace {

constexpr std::string_view kBugNames[] = {"none",
                                          "local-norm",
                                          "unshared-overflow",
                                          "released-gradients",
                                          "forgotten-tied-weight",
                                          "prefetch-order"};
constexpr int kBugCount = static_cast<int>(std::size(kBugNames));

// Rank r's rows of step k: B sequences of T + 1 pseudo-random tokens (inputs, targets).
TokenBatch lesson_batch(const LessonSetup& s, int step, int rank) {
  Philox g(1000003ULL * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank));
  TokenBatch b;
  b.B = s.batch;
  b.T = s.seq;
  b.step = step;
  for (std::int64_t i = 0; i < s.batch; ++i) {
    std::vector<std::int32_t> row(static_cast<std::size_t>(s.seq + 1));
    for (auto& t : row) t = static_cast<std::int32_t>(g.next_u32() % 64);
    b.inputs.insert(b.inputs.end(), row.begin(), row.end() - 1);
    b.targets.insert(b.targets.end(), row.begin() + 1, row.end());
  }
  return b;
}

ch03::MixedPrecisionConfig optimizer_config(const LessonSetup& s, std::vector<bool> decays) {
  ch03::MixedPrecisionConfig m;
  m.adamw = AdamWConfig{1e-2, 0.9, 0.95, 1e-8, 0.1};
  m.weight_decay_mask = std::move(decays);
  m.max_grad_norm = s.max_grad_norm;
  m.scaler = s.dtype == DType::kF16 ? ch02::pytorch_config() : ch02::no_scaling_config();
  return m;
}

std::size_t sent(const Communicator& c) {
  std::size_t n = 0;
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    n += c.traffic().totals(op).bytes_sent;
  }
  return n;
}

// The rank's gradient sync: chapter 4's bucketed all-reduce (stage 0) or ZeRO stage 1, 2 or 3,
// with the ZeRO-3 failure modes set on its options. zero and z3 point into sync when it is one.
struct LessonSync {
  std::unique_ptr<GradSync> sync;
  ZeroStage1* zero = nullptr;
  ZeroStage3* z3 = nullptr;
};

LessonSync make_sync(const LessonSetup& s, Communicator& dp, GptModel& model) {
  LessonSync out;
  if (s.zero_stage == 0) {
    ch04::ReducerConfig r;
    r.bucket_cap_bytes = s.bucket_cap_bytes;
    out.sync = std::make_unique<ch04::BucketedAllReduce>(dp, model.registry(), r);
    return out;
  }
  ZeroConfig z;
  z.bucket_cap_bytes = s.bucket_cap_bytes;
  std::unique_ptr<ZeroStage1> zs;
  if (s.zero_stage == 3) {
    Zero3Options z3o;
    z3o.prefetch = s.prefetch;
    z3o.head_gathers_wte = s.bug != ZeroBug::kForgottenTiedWeight;
    if (s.bug == ZeroBug::kPrefetchOrder) {  // the head, then the blocks upwards: wrong
      z3o.backward_order.push_back(s.model.n_layer);
      for (std::int64_t l = 0; l < s.model.n_layer; ++l) z3o.backward_order.push_back(l);
    }
    auto three = std::make_unique<ZeroStage3>(dp, model, z, z3o);
    out.z3 = three.get();
    zs = std::move(three);
  } else if (s.zero_stage == 2) {
    zs = std::make_unique<ZeroStage2>(dp, model.registry(), z);
  } else {
    zs = std::make_unique<ZeroStage1>(dp, model.registry(), z);
  }
  out.zero = zs.get();
  out.sync = std::move(zs);
  return out;
}

// Chapter 3's optimizer on what the sync says this rank owns (every parameter, or its ZeRO
// pieces), with the grid's found-inf vote and count-once norm, and the failure modes that
// break them: the released-gradients mistake steps on stage 1's views of the full gradients,
// the unshared overflow keeps its found-inf to itself, the local norm sums one shard.
ch03::MixedPrecisionOptimizer make_optimizer(const LessonSetup& s, const LessonSync& ls,
                                             ParamRegistry& reg, StepReductions& red,
                                             const std::vector<bool>& counted) {
  const bool full_views = ls.zero && s.bug == ZeroBug::kReleasedGradients;
  ch03::MixedPrecisionOptimizer opt(
      ls.sync->owned_params(reg),
      full_views ? ls.zero->ZeroStage1::shard_grads() : ls.sync->owned_grads(reg),
      optimizer_config(s, ls.sync->owned_weight_decay(reg)));
  if (s.bug != ZeroBug::kUnsharedOverflow) {
    opt.set_found_inf_reducer([&red](bool f) { return red.found_inf(f); });
  }
  const bool local_norm = ls.zero && s.bug == ZeroBug::kLocalNorm;
  opt.set_grad_norm_fn([&red, &counted, local_norm, sync = ls.sync.get(),
                        zero = ls.zero](std::span<const Tensor> g) {
    if (local_norm) return std::sqrt(zero->local_sum_of_squares(g, counted));  // the mistake
    return red.grad_norm(sync->counted_sum_of_squares(g, counted));
  });
  return opt;
}

// What the lesson reports of the partition: padded and owned elements (a replica owns all).
void record_partition(const LessonSync& ls, const ParamRegistry& reg, int rank, RankResult& out) {
  out.params = reg.numel();
  if (!ls.zero) {
    out.padded = out.owned = reg.numel();
    return;
  }
  out.padded = ls.zero->partition().padded_elements();
  out.owned = ls.zero->partition().owned_elements(rank);
  if (ls.z3) out.wte_padded = ls.z3->partition().buckets()[ls.z3->unit_buckets(-1).front()].padded;
}

void run_rank(const LessonSetup& s, Communicator& comm, RankResult& out) {
  ParallelGrid grid(comm, GridShape{comm.size(), 1, 1});
  GptOptions o;
  o.dtype = s.dtype;
  o.seed = 1;
  GptModel model(s.model, o);
  ParamRegistry& reg = model.registry();
  const LessonSync ls = make_sync(s, grid.dp(), model);
  GradSync& sync = *ls.sync;
  model.set_grad_ready_hook([&](std::size_t e) { sync.grad_ready(e); });
  StepReductions red(&grid);
  const std::vector<bool> counted = sync.norm_counted(reg, grid.coord());
  ch03::MixedPrecisionOptimizer opt = make_optimizer(s, ls, reg, red, counted);
  SingleStage schedule(1);
  std::vector<TraceSpan> spans;
  std::size_t grad_bytes = 0;  // sent by the gradient and parameter collectives alone
  // ZeRO-3's parameter gathers travel on their own communicator.
  auto sent_all = [&] { return sent(grid.dp()) + (ls.z3 ? sent(ls.z3->gather_comm()) : 0); };
  // The working copy's hash: ZeRO-3 holds only a shard of it, so it is gathered whole.
  Tensor whole;
  if (ls.z3) whole = Tensor::zeros({reg.numel()}, s.dtype, MemCategory::kOther);
  auto hash_now = [&] {
    if (!ls.z3) return weights_hash(reg.flat_params());
    ls.z3->gather_full(whole);
    return weights_hash(whole);
  };
  for (int k = 0; k < s.steps; ++k) {
    const std::size_t before = sent_all();
    sync.begin_step();
    const ScheduleResult r = schedule.run_step(
        model, [&] { return lesson_batch(s, k, comm.rank()); }, sync, opt.loss_scale(),
        comm.rank(), spans);
    sync.finish();
    grad_bytes += sent_all() - before;
    if (s.bug == ZeroBug::kUnsharedOverflow && k == 2 && comm.rank() == comm.size() - 1) {
      // An overflow in the last rank's part of the gradients (its shard, under ZeRO).
      Tensor g = ls.zero ? ls.zero->shard_grads().front() : reg.flat_grads();
      g.flat_slice(0, 1).fill(std::numeric_limits<float>::infinity());
    }
    StepRecord rec;
    rec.loss = red.loss(r.loss_sum);
    const ch03::StepReport rep = opt.step();
    const std::size_t before_gather = sent_all();
    if (rep.taken) sync.gather_params();  // ZeRO: every rank's stepped shard, to every replica
    grad_bytes += sent_all() - before_gather;
    rec.grad_norm = rep.grad_norm;
    rec.clip_coef = rep.clip_coef;
    rec.skipped = !rep.taken;
    rec.weights_hash = hash_now();
    out.steps.push_back(rec);
  }
  out.sent_per_step = grad_bytes / static_cast<std::size_t>(s.steps);
  const MemoryLedger& ledger = current_ledger();
  for (MemCategory c : kAllMemCategories) out.mem[static_cast<std::size_t>(c)] = ledger.live(c);
  record_partition(ls, reg, comm.rank(), out);
}

}  // namespace

std::string_view bug_name(ZeroBug b) { return kBugNames[static_cast<int>(b)]; }

ZeroBug parse_bug(std::string_view text) {
  std::string names;
  for (int i = 0; i < kBugCount; ++i) {
    if (text == kBugNames[i]) return static_cast<ZeroBug>(i);
    names += (i ? "|" : "") + std::string(kBugNames[i]);
  }
  throw InputError("unknown bug '" + std::string(text) + "': one of " + names);
}

std::vector<RankResult> run_lesson(const LessonSetup& s) {
  std::vector<RankResult> out(static_cast<std::size_t>(s.ranks));
  std::mutex mu;
  try {
    run_local(s.ranks, [&](Communicator& comm) {
      RankResult& mine = out[static_cast<std::size_t>(comm.rank())];
      run_rank(s, comm, mine);
    });
  } catch (const std::exception& e) {
    // A broken collective fails every rank (CommError names the rank and the calls).
    std::lock_guard lock(mu);
    for (RankResult& r : out) r.error = e.what();
  }
  return out;
}

}  // namespace mixpar::ch05
