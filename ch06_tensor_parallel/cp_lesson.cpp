#include "ch06_tensor_parallel/cp_lesson.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <mutex>

#include "ch06_tensor_parallel/ring_attention.h"
#include "comm/local_backend.h"
#include "model/layers.h"
#include "parallel/replicas.h"
#include "random/philox.h"
#include "tensor/ledger.h"

namespace mixpar::ch06 {
namespace {

Tensor random_tensor(Shape shape, std::uint64_t seed, std::uint64_t stream) {
  Philox gen(seed, stream, 0);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = gen.next_uniform(-1.0f, 1.0f);
  return Tensor::from_floats(v, shape);
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  }
  return a.size() == b.size() ? m : INFINITY;
}

double cp_output_tolerance(const CpCase& c, double scale) {
  const double u = std::ldexp(1.0, -24);
  return (2.0 * double(c.T) + 8.0 * c.cp) * u * scale;
}

double cp_grad_tolerance(const CpCase& c, double scale) {
  return 3.0 * cp_output_tolerance(c, scale);
}

CpCaseResult run_cp_case(const CpCase& c) {
  CpCaseResult r;
  const std::int64_t B = c.B, T = c.T, C = c.C;
  Tensor qkv = random_tensor({B, T, 3 * C}, c.seed, 0);
  const Tensor dout = random_tensor({B, T, C}, c.seed, 1);
  if (c.perturb_position >= 0) {
    float* p = qkv.data_as<float>();
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t i = C; i < 3 * C; ++i) p[(b * T + c.perturb_position) * 3 * C + i] += 1.0f;
    }
  }
  const Tensor qkv_d = qkv.to(c.dtype), dout_d = dout.to(c.dtype);
  {  // one device
    const std::size_t before = current_ledger().live(MemCategory::kActivations);
    Tensor x = qkv_d.with_category(MemCategory::kActivations);
    Tensor out = Tensor::empty({B, T, C}, c.dtype, MemCategory::kActivations);
    Tensor att = Tensor::empty({B, c.n_head, T, T}, c.dtype, MemCategory::kActivations);
    layers::attention_forward(x, c.n_head, out, att);
    r.one_device_activation_bytes = current_ledger().live(MemCategory::kActivations) - before;
    Tensor dqkv = Tensor::empty({B, T, 3 * C}, c.dtype);
    Tensor datt = Tensor::empty({B, c.n_head, T, T}, c.dtype);
    layers::attention_backward(dout_d, x, att, c.n_head, dqkv, datt);
    r.ref_out = out.to_floats();
    r.ref_dqkv = dqkv.to_floats();
  }
  const CpLayout layout = cp_layout(T, c.cp, c.split);
  // What the ranks believe about where their rows sit (the bug: contiguous).
  const CpLayout believed =
      c.positions_as_contiguous ? cp_layout(T, c.cp, CpSplit::kContiguous) : layout;
  Tensor out_full = Tensor::zeros({B, T, C}, DType::kF32);
  Tensor dqkv_full = Tensor::zeros({B, T, 3 * C}, DType::kF32);
  r.work.resize(static_cast<std::size_t>(c.cp));
  r.forward_bytes.resize(static_cast<std::size_t>(c.cp));
  r.backward_bytes.resize(static_cast<std::size_t>(c.cp));
  r.activation_bytes.resize(static_cast<std::size_t>(c.cp));
  std::mutex mu;
  auto rank_body = [&](Communicator* comm) {
    const int rank = comm ? comm->rank() : 0;
    const auto u = static_cast<std::size_t>(rank);
    const std::vector<std::int64_t> pos = chunk_positions(layout.chunks[u]);
    const std::size_t before = current_ledger().live(MemCategory::kActivations);
    const Tensor x = take_positions(qkv_d, pos).with_category(MemCategory::kActivations);
    const Tensor g = take_positions(dout_d, pos);
    Tensor out = Tensor::empty({B, T / c.cp, C}, c.dtype, MemCategory::kActivations);
    std::unique_ptr<CpAttention> attn = make_cp_attention(c.algo, comm, believed, c.n_head, c.bugs);
    CpAttentionSaved saved;
    if (comm) comm->traffic().reset();
    attn->forward(x, out, saved);
    const std::size_t act = current_ledger().live(MemCategory::kActivations) - before;
    const std::size_t fwd = comm ? comm->traffic().total().bytes_sent : 0;
    if (comm) comm->traffic().reset();
    Tensor dqkv = Tensor::empty({B, T / c.cp, 3 * C}, c.dtype);
    attn->backward(g, x, out, saved, dqkv);
    const std::size_t bwd = comm ? comm->traffic().total().bytes_sent : 0;
    const Tensor o32 = out.to(DType::kF32), d32 = dqkv.to(DType::kF32);
    std::lock_guard<std::mutex> lock(mu);
    put_positions(o32, pos, out_full);
    put_positions(d32, pos, dqkv_full);
    if (const auto* ring = dynamic_cast<const RingAttention*>(attn.get()))
      r.work[u] = ring->last_work();
    r.forward_bytes[u] = fwd;
    r.backward_bytes[u] = bwd;
    r.activation_bytes[u] = act;
  };
  if (c.cp == 1) {
    rank_body(nullptr);
  } else {
    LocalOptions opts;
    opts.synchronous_sends = c.synchronous_sends;
    run_local(
        c.cp, [&](Communicator& world) { rank_body(&world); }, opts);
  }
  r.out = out_full.to_floats();
  r.dqkv = dqkv_full.to_floats();
  r.out_error = max_abs_diff(r.out, r.ref_out);
  r.grad_error = max_abs_diff(r.dqkv, r.ref_dqkv);
  r.out_scale = max_abs(r.ref_out);
  r.grad_scale = max_abs(r.ref_dqkv);
  return r;
}

}  // namespace mixpar::ch06

namespace mixpar::ch06 {

CpTrainResult train_cp_attention(const CpTrainConfig& c) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Map = Eigen::Map<RowMat>;
  using CMap = Eigen::Map<const RowMat>;
  CpTrainResult res;
  res.loss.assign(static_cast<std::size_t>(c.steps), 0.0);
  const std::int64_t B = c.B, T = c.T, C = c.C, Tl = T / c.cp;
  const CpLayout layout = cp_layout(T, c.cp, c.split);
  const Tensor w0 = random_tensor({C, 3 * C}, c.seed, 7);
  std::vector<std::vector<float>> final_w(static_cast<std::size_t>(c.cp));
  std::mutex mu;
  auto rank_body = [&](Communicator* comm) {
    const int rank = comm ? comm->rank() : 0;
    const std::vector<std::int64_t> pos =
        chunk_positions(layout.chunks[static_cast<std::size_t>(rank)]);
    Tensor w = w0.clone();
    std::unique_ptr<CpAttention> attn = make_cp_attention(c.algo, comm, layout, c.n_head);
    for (int s = 0; s < c.steps; ++s) {
      const Tensor x = take_positions(random_tensor({B, T, C}, c.seed, 100), pos);
      const Tensor r = take_positions(random_tensor({B, T, C}, c.seed, 200), pos);
      Tensor qkv = Tensor::empty({B, Tl, 3 * C}, DType::kF32);
      const CMap xm(x.data_as<float>(), B * Tl, C);
      Map(qkv.data_as<float>(), B * Tl, 3 * C).noalias() = xm * CMap(w.data_as<float>(), C, 3 * C);
      Tensor out = Tensor::empty({B, Tl, C}, DType::kF32);
      CpAttentionSaved saved;
      attn->forward(qkv, out, saved);
      const float inv = 1.0f / float(B * T);
      Tensor loss = Tensor::zeros({1}, DType::kF64);
      double l = 0;
      for (std::int64_t i = 0; i < out.numel(); ++i)
        l += double(out.data_as<float>()[i]) * r.data_as<float>()[i];
      loss.data_as<double>()[0] = l * inv;
      Tensor dout = Tensor::empty({B, Tl, C}, DType::kF32);
      for (std::int64_t i = 0; i < dout.numel(); ++i)
        dout.data_as<float>()[i] = r.data_as<float>()[i] * inv;
      Tensor dqkv = Tensor::empty({B, Tl, 3 * C}, DType::kF32);
      attn->backward(dout, qkv, out, saved, dqkv);
      Tensor dw = Tensor::empty({C, 3 * C}, DType::kF32);
      Map(dw.data_as<float>(), C, 3 * C).noalias() =
          xm.transpose() * CMap(dqkv.data_as<float>(), B * Tl, 3 * C);
      if (comm) {
        comm->all_reduce(loss);
        if (c.sum_gradients) comm->all_reduce(dw);  // parameters are replicated over cp
      }
      float* wp = w.data_as<float>();
      const float* g = dw.data_as<float>();
      for (std::int64_t i = 0; i < w.numel(); ++i) wp[i] -= float(c.lr) * g[i];
      const bool same = comm ? check_replicas(*comm, w).ok : true;
      std::lock_guard<std::mutex> lock(mu);
      if (rank == 0) res.loss[static_cast<std::size_t>(s)] = loss.data_as<double>()[0];
      if (!same && res.first_drift_step == 0) res.first_drift_step = s + 1;
    }
    std::lock_guard<std::mutex> lock(mu);
    final_w[static_cast<std::size_t>(rank)] = w.to_floats();
  };
  if (c.cp == 1) {
    rank_body(nullptr);
  } else {
    run_local(c.cp, [&](Communicator& world) { rank_body(&world); });
  }
  res.weight = final_w[0];
  for (const auto& w : final_w)
    res.replica_drift = std::max(res.replica_drift, max_abs_diff(w, final_w[0]));
  return res;
}

}  // namespace mixpar::ch06
