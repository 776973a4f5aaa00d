#include "ch06_tensor_parallel/tp_lesson.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "optim/adamw.h"
#include "parallel/count_once.h"
#include "random/philox.h"

namespace mixpar::ch06 {
void lesson_batch(std::uint64_t seed, int step, std::int64_t B, std::int64_t T,
                  std::int64_t vocab_size, std::vector<std::int32_t>& tok,
                  std::vector<std::int32_t>& tgt) {
  const auto n = static_cast<std::size_t>(B * T);
  tok.resize(n);
  tgt.resize(n);
  Philox gen(seed + 1000, /*stream=*/static_cast<std::uint64_t>(step), 0);
  for (std::size_t i = 0; i < n; ++i) {
    tok[i] = static_cast<std::int32_t>(gen.next_u32() % static_cast<std::uint32_t>(vocab_size));
    tgt[i] = static_cast<std::int32_t>((tok[i] + 1) % vocab_size);
  }
}

namespace {

// Writes this rank's shards into full [unpadded] tensors (the held elements of each).
void scatter_into_full(const ParamRegistry& r, std::map<std::string, std::vector<float>>& full,
                       std::int64_t vocab, std::mutex& mu) {
  std::lock_guard<std::mutex> lock(mu);
  for (const ParamEntry& e : r.entries()) {
    std::vector<float>& dst = full[e.name];
    const std::int64_t n = shape_numel(e.shape);
    if (dst.empty()) dst.assign(static_cast<std::size_t>(n), 0.0f);
    const std::vector<float> mine = e.param.to_floats();
    std::int64_t k = 0;
    for (const ElementRange& run : held_elements(e.shape, e.holding)) {
      for (std::int64_t i = 0; i < run.count; ++i, ++k) {
        dst[static_cast<std::size_t>(run.begin + i)] = mine[static_cast<std::size_t>(k)];
      }
    }
  }
  std::vector<float>& wte = full["wte.weight"];  // the padding rows are not the model's
  wte.resize(static_cast<std::size_t>(vocab * r.at("wte.weight").shape[1]));
}

void run_rank(const TpRunConfig& c, Communicator* tp_comm, TpRunResult& out, std::mutex& mu) {
  const int rank = tp_comm ? tp_comm->rank() : 0, size = tp_comm ? tp_comm->size() : 1;
  std::unique_ptr<TpCollectives> ops;
  if (tp_comm) ops = std::make_unique<TpCollectives>(*tp_comm, c.bugs);
  GptOptions o;
  o.dtype = c.dtype;
  o.seed = c.seed;
  o.tp = TensorShard{rank, size};
  o.tp_ops = ops.get();
  o.sequence_parallel = c.sequence_parallel;
  GptModel model(c.model, o);
  std::vector<Tensor> params, grads;
  std::vector<bool> decay;
  for (const ParamEntry& e : model.registry().entries()) {
    params.push_back(e.param);
    grads.push_back(e.grad);
    decay.push_back(e.weight_decay);
  }
  AdamW opt(params, AdamWConfig{c.lr, 0.9, 0.999, 1e-8, 0.01}, decay);
  const GridCoord at{rank, 0, rank, 0};
  const std::vector<bool> counted = norm_counted(model.registry().entries(), at);
  const std::vector<bool> all(counted.size(), true);
  auto world_sum = [&](double x) {
    if (!tp_comm) return x;
    Tensor t = Tensor::zeros({1}, DType::kF64);
    t.data_as<double>()[0] = x;
    tp_comm->all_reduce(t);
    return t.data_as<double>()[0];
  };
  std::vector<std::int32_t> tok, tgt;
  MemoryLedger& ledger = current_ledger();
  for (int s = 0; s < c.steps; ++s) {
    lesson_batch(c.seed, s, c.B, c.T, c.model.vocab_size, tok, tgt);
    if (s == 0) ledger.reset_peaks();
    const std::size_t act_before = ledger.live(MemCategory::kActivations);
    const double loss = model.forward(tok, tgt, c.B, c.T);
    model.backward();
    if (s == 0) {
      const std::size_t peak = ledger.peak(MemCategory::kActivations) - act_before;
      if (rank == 0) {
        out.activation_peak = peak;
        if (ops) out.traffic = ops->traffic();
      }
    }
    const double norm = std::sqrt(world_sum(counted_sum_of_squares(grads, counted)));
    const double naive = std::sqrt(world_sum(counted_sum_of_squares(grads, all)));
    const double used = c.norm_counts_replicas ? naive : norm;
    bool clipped = false;
    if (c.max_grad_norm > 0 && used > c.max_grad_norm) {
      const double coef = c.max_grad_norm / (used + 1e-6);
      for (Tensor& g : grads) ops::scale(g, coef);
      clipped = true;
    }
    opt.step(grads);
    if (rank == 0) {
      out.loss.push_back(loss);
      out.grad_norm.push_back(norm);
      out.naive_norm.push_back(naive);
      out.clipped.push_back(clipped ? 1 : 0);
    }
  }
  scatter_into_full(model.registry(), out.weights, c.model.vocab_size, mu);
  if (tp_comm) {  // replicas of a replicated parameter: max |mine - rank 0's|
    double drift = 0;
    for (const ParamEntry& e : model.registry().entries()) {
      if (e.holding.split != ParamSplit::kReplicated) continue;
      Tensor first = e.param.to(DType::kF32).with_category(MemCategory::kOther);
      tp_comm->broadcast(first, 0);
      const std::vector<float> a = first.to_floats(), b = e.param.to_floats();
      for (std::size_t i = 0; i < a.size(); ++i) {
        drift = std::max(drift, double(std::fabs(a[i] - b[i])));
      }
    }
    Tensor d = Tensor::zeros({1}, DType::kF64);
    d.data_as<double>()[0] = drift;
    tp_comm->all_reduce(d, ReduceOp::kMax);
    if (rank == 0) out.replica_drift = d.data_as<double>()[0];
  }
}

}  // namespace

TpRunResult train_tensor_parallel(const TpRunConfig& cfg) {
  TpRunResult out;
  std::mutex mu;
  if (cfg.tp == 1) {
    run_rank(cfg, nullptr, out, mu);
    return out;
  }
  run_local(cfg.tp, [&](Communicator& world) {
    ParallelGrid grid(world, GridShape{1, cfg.tp, 1});
    run_rank(cfg, &grid.tp(), out, mu);
  });
  return out;
}

double max_weight_difference(const TpRunResult& a, const TpRunResult& b) {
  double d = 0;
  for (const auto& [name, wa] : a.weights) {
    const std::vector<float>& wb = b.weights.at(name);
    if (wa.size() != wb.size()) return INFINITY;
    for (std::size_t i = 0; i < wa.size(); ++i) d = std::max(d, double(std::fabs(wa[i] - wb[i])));
  }
  return d;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = a.size() == b.size() ? 0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, std::fabs(a[i] - b[i]));
  }
  return d;
}

}  // namespace mixpar::ch06
