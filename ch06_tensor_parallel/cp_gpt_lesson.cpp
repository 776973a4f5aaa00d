// train_cp_gpt: chapter 6's GPT with its sequences split over cp ranks (cp_lesson.h).
#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "ch06_tensor_parallel/cp_grad_sync.h"
#include "ch06_tensor_parallel/cp_lesson.h"
#include "ch06_tensor_parallel/cp_model_attention.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "ch06_tensor_parallel/tp_gather.h"
#include "ch06_tensor_parallel/tp_lesson.h"
#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
#include "ops/elementwise.h"
#include "optim/adamw.h"
#include "parallel/count_once.h"
#include "random/philox.h"

namespace mixpar::ch06 {
namespace {

// Rows [b0, b0 + Bl) of a [B, T] batch, positions `pos` of each.
std::vector<std::int32_t> rows_of(const std::vector<std::int32_t>& full, std::int64_t T,
                                  std::int64_t b0, std::int64_t Bl,
                                  const std::vector<std::int64_t>& pos) {
  std::vector<std::int32_t> out;
  for (std::int64_t b = b0; b < b0 + Bl; ++b) {
    for (std::int64_t p : pos) out.push_back(full[static_cast<std::size_t>(b * T + p)]);
  }
  return out;
}

double sum_over(Communicator* comm, double x, ReduceOp op = ReduceOp::kSum) {
  if (comm == nullptr) return x;
  Tensor t = Tensor::zeros({1}, DType::kF64);
  t.data_as<double>()[0] = x;
  comm->all_reduce(t, op);
  return t.data_as<double>()[0];
}

void run_rank(const CpGptConfig& c, ParallelGrid* grid, CpGptResult& out, std::mutex& mu) {
  const GridCoord at = grid ? grid->coord() : GridCoord{};
  std::unique_ptr<TpCollectives> tp_ops;
  if (c.tp > 1) tp_ops = std::make_unique<TpCollectives>(grid->tp());
  const CpLayout layout = cp_layout(c.T, c.cp, c.split);
  std::unique_ptr<CpModelAttention> seam;
  if (c.cp > 1) seam = std::make_unique<CpModelAttention>(grid->cp(), layout, c.algo);
  GptOptions o;
  o.dtype = c.dtype;
  o.seed = c.seed;
  o.tp = TensorShard{at.tp, c.tp};
  o.tp_ops = tp_ops.get();
  o.sequence_parallel = c.sequence_parallel;
  o.attention = seam.get();
  GptModel model(c.model, o);
  std::vector<Tensor> params, grads;
  std::vector<bool> decay;
  for (const ParamEntry& e : model.registry().entries()) {
    params.push_back(e.param);
    grads.push_back(e.grad);
    decay.push_back(e.weight_decay);
  }
  AdamW opt(params, AdamWConfig{c.lr, 0.9, 0.999, 1e-8, 0.01}, decay);
  const std::vector<bool> counted = norm_counted(model.registry().entries(), at);
  Communicator* replicas = grid && c.dp * c.cp > 1 ? &grid->dp_cp() : nullptr;
  Communicator* tp = grid && c.tp > 1 ? &grid->tp() : nullptr;
  Communicator* cp = grid && c.cp > 1 ? grid->cp() : nullptr;
  Communicator* dp = grid && c.dp > 1 ? &grid->dp() : nullptr;
  const double n_replicas = double(c.dp * c.cp);
  const std::int64_t Bl = c.B / c.dp;
  const std::vector<std::int64_t> pos =
      chunk_positions(layout.chunks[static_cast<std::size_t>(at.cp)]);
  std::vector<std::int32_t> tok, tgt;
  for (int s = 0; s < c.steps; ++s) {
    lesson_batch(c.seed, s, c.B, c.T, c.model.vocab_size, tok, tgt);
    const std::vector<std::int32_t> my_tok = rows_of(tok, c.T, at.dp * Bl, Bl, pos);
    const std::vector<std::int32_t> my_tgt = rows_of(tgt, c.T, at.dp * Bl, Bl, pos);
    // The mean over this rank's rows; every rank holds as many, so the mean over dp x cp of
    // these is the mean over the batch, and so is the average of the gradients.
    const double loss =
        sum_over(replicas, model.forward(my_tok, my_tgt, Bl, layout.local_len())) / n_replicas;
    model.backward();
    // Parameters are replicated over cp and over dp: each gradient's cp shares summed by the
    // chapter's cp rule (cp_grad_sync.h, the trainer's too), then the mean over dp.
    for (Tensor& g : grads) {
      if (cp != nullptr) sum_cp_shares(*cp, g);
      if (dp != nullptr) {
        dp->all_reduce(g);
        ops::scale(g, 1.0 / c.dp);
      }
    }
    const double norm = std::sqrt(sum_over(tp, counted_sum_of_squares(grads, counted)));
    opt.step(grads);
    if (at.rank == 0) {
      out.loss.push_back(loss);
      out.grad_norm.push_back(norm);
    }
  }
  // Full tensors (gathered over tp) from replica (dp 0, cp 0); the drift between replicas.
  std::map<std::string, std::vector<float>> w;
  if (grid != nullptr) {
    for (const NamedTensor& t :
         gather_full_tensors(grid->tp(), model.registry(), params, c.model.vocab_size)) {
      w[t.name] = t.tensor.to_floats();
    }
  } else {
    for (const ParamEntry& e : model.registry().entries()) w[e.name] = e.param.to_floats();
  }
  double drift = 0;
  if (replicas != nullptr) {
    for (const ParamEntry& e : model.registry().entries()) {
      Tensor first = e.param.to(DType::kF32).with_category(MemCategory::kOther);
      replicas->broadcast(first, 0);
      const std::vector<float> a = first.to_floats(), b = e.param.to_floats();
      for (std::size_t i = 0; i < a.size(); ++i) {
        drift = std::max(drift, double(std::fabs(a[i] - b[i])));
      }
    }
  }
  drift = sum_over(grid ? &grid->world() : nullptr, drift, ReduceOp::kMax);
  std::lock_guard<std::mutex> lock(mu);
  if (at.dp == 0 && at.cp == 0 && at.tp == 0) out.weights = std::move(w);
  out.replica_drift = std::max(out.replica_drift, drift);
}

}  // namespace

CpGptResult train_cp_gpt(const CpGptConfig& c) {
  CpGptResult out;
  std::mutex mu;
  const GridShape shape{.dp = c.dp, .tp = c.tp, .pp = 1, .cp = c.cp};
  if (shape.world() == 1) {
    run_rank(c, nullptr, out, mu);
    return out;
  }
  run_local(shape.world(), [&](Communicator& world) {
    ParallelGrid grid(world, shape);
    run_rank(c, &grid, out, mu);
  });
  return out;
}

double max_weight_difference(const CpGptResult& a, const CpGptResult& b) {
  double d = a.weights.size() == b.weights.size() ? 0 : INFINITY;
  for (const auto& [name, wa] : a.weights) {
    const auto it = b.weights.find(name);
    if (it == b.weights.end() || it->second.size() != wa.size()) return INFINITY;
    d = std::max(d, max_abs_diff(wa, it->second));
  }
  return d;
}

}  // namespace mixpar::ch06
