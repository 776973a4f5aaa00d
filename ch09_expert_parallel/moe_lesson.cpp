// Chapter 9's lesson: every number printed is measured on the layer of moe_layer.h.
#include "ch09_expert_parallel/moe_lesson.h"
#include "ch09_expert_parallel/lesson_measures.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>

#include "ch09_expert_parallel/aux_loss_scale.h"
#include "ch09_expert_parallel/capacity.h"
#include "ch09_expert_parallel/expert_mesh.h"
#include "ch09_expert_parallel/grouped_gemm.h"
#include "ch09_expert_parallel/moe_layer.h"
#include "ch09_expert_parallel/permutation.h"
#include "ch09_expert_parallel/router.h"
#include "comm/local_backend.h"
#include "model/block_linear.h"
#include "model/layers.h"
#include "ops/fixed_order.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "random/philox.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"

namespace mixpar::ch09 {
namespace {

std::vector<float> concat(const std::vector<Tensor>& ts) {
  std::vector<float> out;
  for (const Tensor& t : ts) {
    const std::vector<float> v = t.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

Tensor lesson_tokens(std::int64_t T, std::int64_t C, std::uint64_t seed, float shared) {
  Tensor x = normal({T, C}, seed);
  if (shared != 0) {
    const Tensor u = normal({C}, 77);
    const std::vector<float> dir = u.to_floats();
    double norm = 0;
    for (float v : dir) norm += double(v) * v;
    const float s = shared * static_cast<float>(std::sqrt(double(C) / norm));
    float* p = x.data_as<float>();
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t c = 0; c < C; ++c) p[t * C + c] += s * dir[std::size_t(c)];
    }
  }
  return x;
}

MoeConfig lesson_config() {
  MoeConfig c;
  c.d_model = 16;
  c.d_hidden = 32;
  c.n_experts = 4;
  c.top_k = 2;
  c.seed = 5;
  return c;
}

// ---- Expert parallelism on local ranks.

EpRun run_expert_parallel(const MoeConfig& c, const EpRunOptions& o) {
  EpRun run;
  const int n = o.world;
  run.y.resize(std::size_t(n));
  run.dx.resize(std::size_t(n));
  run.bias.resize(std::size_t(n));
  run.kept.resize(std::size_t(n));
  run.sent.resize(std::size_t(n));
  run.sent_formula.resize(std::size_t(n));
  std::mutex mu;
  run_local(n, [&](Communicator& world) {
    const DeviceMesh mesh = DeviceMesh::standard(n, 1, 1, 1);
    ExpertGroups g = split_expert_groups(world, mesh, o.ep);
    MoeLayer layer(c, {g.ep.get(), g.dense.get(), o.dispatch});
    const int r = world.rank();
    const Tensor x = lesson_tokens(o.tokens, c.d_model, 100 + std::uint64_t(r));
    const Tensor dy = normal({o.tokens, c.d_model}, 200 + std::uint64_t(r), 0.1f);
    const Tensor y = layer.forward(x);
    MoeBackwardOptions b;
    b.aux_seed = aux_grad_seed(c.aux_loss_coef, {});
    b.z_seed = aux_grad_seed(c.z_loss_coef, {});
    const Tensor dx = layer.backward(dy, b);
    sync_moe_grads(layer, g.dense.get(), o.expert_grads_over_dp ? g.dense.get() : g.edp.get());
    layer.update_bias(o.bias_counts_reduced);
    const std::size_t sent = g.ep->traffic().total().bytes_sent;
    const std::vector<std::int64_t> kept = layer.stats().kept;
    std::lock_guard lock(mu);
    const auto R = std::size_t(r);
    run.y[R] = y.to_floats();
    run.dx[R] = dx.to_floats();
    run.bias[R] = layer.expert_bias();
    run.kept[R] = kept;
    run.sent[R] = sent;
    if (r == 0) run.router_grad = layer.router_grad().to_floats();
    if (g.edp->rank() == 0) {
      const ExpertWeights& eg = layer.expert_grads();
      const std::int64_t C = c.d_model, H = c.d_hidden;
      for (int e = 0; e < eg.count(); ++e) {
        run.expert_grads[eg.first + e] =
            concat({eg.fc_w.flat_slice(e * C * H, C * H), eg.fc_b.flat_slice(e * H, H),
                    eg.proj_w.flat_slice(e * H * C, H * C), eg.proj_b.flat_slice(e * C, C)});
      }
    }
  });
  // The all-to-all's bytes from the routing: the counts (E/ep per peer, 8 bytes each), then
  // each row that crosses ranks four times (x there, y back, dy there, dx back), C FP32 each.
  if (o.dispatch == DispatchKind::kAllToAll && o.ep > 1) {
    const int El = c.n_experts / o.ep;
    for (int r = 0; r < n; ++r) {
      const int base = (r / o.ep) * o.ep, mine = r % o.ep;  // its ep group, its place there
      std::int64_t out_rows = 0, in_rows = 0;
      for (int e = 0; e < c.n_experts; ++e) {
        if (e / El != mine) out_rows += run.kept[std::size_t(r)][std::size_t(e)];
      }
      for (int s = base; s < base + o.ep; ++s) {
        if (s == r) continue;
        for (int e = mine * El; e < (mine + 1) * El; ++e) in_rows += run.kept[std::size_t(s)][std::size_t(e)];
      }
      run.sent_formula[std::size_t(r)] = std::size_t(o.ep - 1) * std::size_t(El) * 8 +
                                         2 * std::size_t(out_rows + in_rows) * std::size_t(c.d_model) * 4;
    }
  }
  return run;
}

std::size_t all_gather_bytes_formula(std::int64_t tokens, std::int64_t d_model, int top_k, int ep) {
  return 16 * std::size_t(ep - 1) * std::size_t(tokens) * std::size_t(d_model + top_k);
}

// ---- Sections.

Section router_precision() {
  Section s;
  s.title = "The router in FP32: top-k is a decision on differences BF16 cannot hold";
  const std::int64_t T = 4096, C = 64, E = 64;
  const int k = 2;
  const Tensor x = lesson_tokens(T, C, 11);
  const Tensor w = normal({C, E}, 3, static_cast<float>(1.0 / std::sqrt(double(C))));
  // The FP64 reference, then the FP32 router and a BF16 one (operands and result in BF16).
  const std::vector<float> xv = x.to_floats(), wv = w.to_floats();
  std::vector<double> ref(static_cast<std::size_t>(T * E));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t e = 0; e < E; ++e) {
      double acc = 0;
      for (std::int64_t c = 0; c < C; ++c) acc += double(xv[std::size_t(t * C + c)]) * wv[std::size_t(c * E + e)];
      ref[std::size_t(t * E + e)] = acc;
    }
  }
  const std::vector<float> f32 = router_forward(x, w).logits.to_floats();
  Tensor b16 = Tensor::empty({T, E}, DType::kBF16);
  {
    // One summation order on every CPU (with or without 16-bit units): the count reproduces.
    const ops::FixedOrderScope fixed;
    ops::matmul(x.to(DType::kBF16), w.to(DType::kBF16), b16);
  }
  const std::vector<float> bf = b16.to_floats();
  const auto top = [&](auto get, std::int64_t t) {
    std::vector<int> idx(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) idx[std::size_t(e)] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return get(t, a) > get(t, b); });
    idx.resize(std::size_t(k));
    std::sort(idx.begin(), idx.end());
    return idx;
  };
  std::int64_t flips32 = 0, flips16 = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const auto want = top([&](std::int64_t i, int e) { return ref[std::size_t(i * E + e)]; }, t);
    flips32 += top([&](std::int64_t i, int e) { return double(f32[std::size_t(i * E + e)]); }, t) != want;
    flips16 += top([&](std::int64_t i, int e) { return double(bf[std::size_t(i * E + e)]); }, t) != want;
  }
  TextTable tab({"router", "tokens whose top-2 differs from FP64's", "of " + num(T)});
  tab.add({"FP32", num(flips32), fmt("%.2f%%", 100.0 * double(flips32) / double(T))});
  tab.add({"BF16", num(flips16), fmt("%.2f%%", 100.0 * double(flips16) / double(T))});
  s.text = fmt("%lld tokens, C %lld, E %lld, top-%d: the experts chosen from the logits x w\n",
               static_cast<long long>(T), static_cast<long long>(C), static_cast<long long>(E), k) +
           tab.str();
  s.claims.push_back(yes_claim("a BF16 router sends some tokens to other experts", flips16 > 0));
  s.claims.push_back({"the FP32 router flips at most a tenth as many as BF16", "<= " + num(flips16 / 10),
                      num(flips32), flips32 * 10 <= flips16});
  return s;
}

Section dense_equality() {
  Section s;
  s.title = "One expert, top-1, no capacity limit: the GPT MLP, bit for bit";
  MoeConfig c = lesson_config();
  c.n_experts = 1;
  c.top_k = 1;
  c.d_hidden = 64;
  const std::int64_t T = 24, C = c.d_model, H = c.d_hidden;
  MoeLayer layer(c, {});
  const Tensor x = lesson_tokens(T, C, 21), dy = normal({T, C}, 22, 0.1f);
  const Tensor y = layer.forward(x);
  const Tensor dx = layer.backward(dy);
  // The dense MLP of a GPT block (model/gpt_block.h): c_fc, GELU, c_proj as DenseLinear layers.
  const ExpertWeights& w = layer.experts();
  LinearParams fc{w.fc_w.view({C, H}), w.fc_b.view({H}), Tensor::zeros({C, H}, DType::kF32),
                  Tensor::zeros({H}, DType::kF32)};
  LinearParams proj{w.proj_w.view({H, C}), w.proj_b.view({C}), Tensor::zeros({H, C}, DType::kF32),
                    Tensor::zeros({C}, DType::kF32)};
  DenseLinear l_fc(fc), l_proj(proj);
  Tensor h_pre = Tensor::empty({T, H}, DType::kF32), h = Tensor::empty({T, H}, DType::kF32);
  Tensor y_dense = Tensor::empty({T, C}, DType::kF32);
  l_fc.forward(x, h_pre);
  layers::gelu_forward(h_pre, h);
  l_proj.forward(h, y_dense);
  Tensor dh = Tensor::empty({T, H}, DType::kF32), dx_dense = Tensor::empty({T, C}, DType::kF32);
  l_proj.backward_input(dy, dh);
  l_proj.backward_weight(h, dy, false);
  layers::gelu_backward(h_pre, dh, dh);
  l_fc.backward_input(dh, dx_dense);
  l_fc.backward_weight(x, dh, false);
  const ExpertWeights& g = layer.expert_grads();
  const bool grads = same_bits(g.fc_w.view({C, H}), fc.dw) && same_bits(g.fc_b.view({H}), fc.db) &&
                     same_bits(g.proj_w.view({H, C}), proj.dw) && same_bits(g.proj_b.view({C}), proj.db);
  const std::vector<float> rg = layer.router_grad().to_floats();
  const bool router_zero = std::all_of(rg.begin(), rg.end(), [](float v) { return v == 0; });
  s.text = fmt("T %lld tokens, C %lld, H %lld: the MoE layer (router, top-1, permutation, grouped\n"
               "GEMMs, combine) against GPT-2's MLP on the same weights (DenseLinear, GELU)\n",
               static_cast<long long>(T), static_cast<long long>(C), static_cast<long long>(H));
  s.claims.push_back(yes_claim("output equals the dense MLP's, bit for bit", same_bits(y, y_dense)));
  s.claims.push_back(yes_claim("input gradient equals the dense MLP's, bit for bit", same_bits(dx, dx_dense)));
  s.claims.push_back(yes_claim("the four weight gradients equal the dense MLP's, bit for bit", grads));
  s.claims.push_back(yes_claim("the router's gradient is exactly zero (a gate of 1 has none)", router_zero));
  return s;
}

Section grouped_gemm_equality() {
  Section s;
  s.title = "The experts as one grouped GEMM: each expert alone, bit for bit";
  const std::int64_t C = 16, H = 32;
  const std::vector<std::int64_t> counts = {5, 0, 9, 2};  // expert 1 receives no token
  std::vector<std::int64_t> off = {0};
  for (std::int64_t n : counts) off.push_back(off.back() + n);
  const std::int64_t N = off.back(), G = std::int64_t(counts.size());
  const Tensor x = normal({N, C}, 31), w = normal({G, C, H}, 32, 0.25f), b = normal({G, H}, 33, 0.1f);
  const Tensor dy = normal({N, H}, 34);
  Tensor y = Tensor::empty({N, H}, DType::kF32), dx = Tensor::empty({N, C}, DType::kF32);
  Tensor dw = Tensor::empty({G, C, H}, DType::kF32), db = Tensor::empty({G, H}, DType::kF32);
  grouped_linear_forward(x, w, b, off, y);
  grouped_linear_backward(x, w, dy, &dx, dw, db, off, false);
  bool fwd = true, bwd = true, empty_zero = true;
  for (std::int64_t e = 0; e < G; ++e) {
    const std::int64_t n = counts[std::size_t(e)];
    const Tensor we = w.flat_slice(e * C * H, C * H).view({C, H}), be = b.flat_slice(e * H, H);
    if (n == 0) {
      for (float v : concat({dw.flat_slice(e * C * H, C * H), db.flat_slice(e * H, H)})) empty_zero = empty_zero && v == 0;
      continue;
    }
    Tensor ye = Tensor::empty({n, H}, DType::kF32), dxe = Tensor::empty({n, C}, DType::kF32);
    Tensor dwe = Tensor::empty({C, H}, DType::kF32), dbe = Tensor::empty({H}, DType::kF32);
    ops::linear_forward(x.rows(off[std::size_t(e)], n), we, &be, ye);
    ops::linear_backward(x.rows(off[std::size_t(e)], n), we, dy.rows(off[std::size_t(e)], n), &dxe, dwe, &dbe);
    fwd = fwd && same_bits(ye, y.rows(off[std::size_t(e)], n));
    bwd = bwd && same_bits(dxe, dx.rows(off[std::size_t(e)], n)) &&
          same_bits(dwe, dw.flat_slice(e * C * H, C * H)) && same_bits(dbe, db.flat_slice(e * H, H));
  }
  s.text = "4 experts receiving 5, 0, 9 and 2 rows, C 16 -> H 32, against ops::linear_forward and\n"
           "linear_backward run on each expert's rows alone\n";
  s.claims.push_back(yes_claim("grouped forward equals each expert alone, bit for bit", fwd));
  s.claims.push_back(yes_claim("grouped backward (dx, dw, db) equals each expert alone, bit for bit", bwd));
  s.claims.push_back(yes_claim("the expert with no rows has zero weight gradients", empty_zero));
  return s;
}

Section permutation_identity() {
  Section s;
  s.title = "Permute, then unpermute: the identity, and so is its gradient";
  const std::int64_t T = 40, C = 8;
  const int E = 6;
  // Router probabilities that never pick experts 2 and 5: two experts get no token.
  Tensor probs = normal({T, E}, 41);
  for (float& v : probs.span<float>()) v = std::abs(v);
  for (std::int64_t t = 0; t < T; ++t) probs.data_as<float>()[t * E + 2] = probs.data_as<float>()[t * E + 5] = 0;
  const Routing r = select_top_k(probs, {}, 1, true);
  const Permutation p = make_permutation(r, std::vector<char>(r.expert.size(), 1), E);
  const Tensor x = normal({T, C}, 42), dz = normal({T, C}, 43);
  Tensor xp = Tensor::empty({p.rows(), C}, DType::kF32), z = Tensor::empty({T, C}, DType::kF32);
  permute_rows(x, p, xp);
  unpermute_rows(xp, p, {}, z);
  // The gradient of z = unpermute(permute(x)): unpermute's backward, then permute's.
  Tensor dzp = Tensor::empty({p.rows(), C}, DType::kF32), dx = Tensor::empty({T, C}, DType::kF32);
  unpermute_backward(dz, p, {}, dzp);
  unpermute_rows(dzp, p, {}, dx);
  bool sorted = true;
  for (std::int64_t row = 1; row < p.rows(); ++row) {
    sorted = sorted && r.expert[std::size_t(p.source[std::size_t(row)])] >=
                           r.expert[std::size_t(p.source[std::size_t(row - 1)])];
  }
  std::string counts;
  for (std::int64_t n : p.counts) counts += (counts.empty() ? "" : ", ") + num(n);
  s.text = fmt("%lld tokens, top-1 over %d experts; rows per expert: %s\n", static_cast<long long>(T),
               E, counts.c_str());
  s.claims.push_back(yes_claim("permuted rows are grouped by expert", sorted));
  s.claims.push_back(yes_claim("experts 2 and 5 receive no rows", p.counts[2] == 0 && p.counts[5] == 0));
  s.claims.push_back(yes_claim("unpermute(permute(x)) == x, bit for bit", same_bits(z, x)));
  s.claims.push_back(yes_claim("its gradient is the identity, bit for bit", same_bits(dx, dz)));
  return s;
}


Section expert_parallel_equality() {
  Section s;
  s.title = "Expert parallelism: ep 1, 2, 4 on dp 4, all-to-all and all-gather";
  const MoeConfig c = ep_config();
  EpRunOptions o;
  const EpRun ref = run_expert_parallel(c, o);
  TextTable t({"ep", "dispatch", "y, dx", "router grad", "bias", "expert grads vs ep 1",
               "ep bytes sent (rank 0)", "formula"});
  bool all_bitwise = true, bytes_ok = true, ag_equal = true;
  double worst_expert = 0;
  Json figure_runs = Json::array();  // every rank's measured bytes beside each formula's
  for (int ep : {1, 2, 4}) {
    std::vector<EpRun> runs;
    for (DispatchKind d : {DispatchKind::kAllToAll, DispatchKind::kAllGather}) {
      if (ep == 1 && d == DispatchKind::kAllGather) continue;
      o.ep = ep;
      o.dispatch = d;
      runs.push_back(ep == 1 ? ref : run_expert_parallel(c, o));
      const EpRun& run = runs.back();
      const EpComparison k = compare(run, ref);
      all_bitwise = all_bitwise && k.y && k.dx && k.router && k.bias;
      worst_expert = std::max(worst_expert, k.expert_rel);
      if (d == DispatchKind::kAllToAll) {
        for (std::size_t r = 0; r < run.sent.size(); ++r) bytes_ok = bytes_ok && run.sent[r] == run.sent_formula[r];
      }
      Json measured = Json::array(), formula = Json::array();
      for (std::size_t r = 0; r < run.sent.size(); ++r) {
        measured.push_back(run.sent[r]);
        formula.push_back(d == DispatchKind::kAllToAll
                              ? run.sent_formula[r]
                              : all_gather_bytes_formula(o.tokens, c.d_model, c.top_k, ep));
      }
      Json j = Json::object();
      j.set("ep", ep);
      j.set("dispatch", dispatch_name(d));
      j.set("bytes_sent", std::move(measured));
      j.set("formula_bytes", std::move(formula));
      figure_runs.push_back(std::move(j));
      t.add({num(ep), dispatch_name(d), k.y && k.dx ? "bitwise" : "DIFFER", k.router ? "bitwise" : "DIFFER",
             k.bias ? "bitwise" : "DIFFER", k.experts_bitwise ? "bitwise" : fmt("%.1e rel.", k.expert_rel),
             num(run.sent[0]), d == DispatchKind::kAllToAll ? num(run.sent_formula[0]) : "-"});
    }
    if (runs.size() == 2) {
      const EpComparison k = compare(runs[1], runs[0]);
      ag_equal = ag_equal && k.y && k.dx && k.router && k.bias && k.experts_bitwise;
    }
  }
  s.text = fmt("dp 4, %lld tokens per rank, E %d, top-%d, aux %.0e, z %.0e, bias rate %.0e; every\n"
               "rank's output and input gradient, the router's and the experts' summed gradients and\n"
               "the expert bias after one update, against ep 1 (each rank all experts)\n",
               static_cast<long long>(o.tokens), c.n_experts, c.top_k, c.aux_loss_coef, c.z_loss_coef,
               c.bias_update_rate) +
           t.str() +
           "The experts' weight gradients sum the same products in another order (over more rows on\n"
           "one rank, over fewer ranks after), hence the bound; every other number is bitwise.\n";
  s.claims.push_back(yes_claim("ep 2 and 4: outputs, input, router gradients and biases equal ep 1's, bit for bit", all_bitwise));
  s.claims.push_back(tolerance_claim("ep 2 and 4: expert gradients equal ep 1's (max relative)",
                                     worst_expert, kExpertGradBound));
  s.claims.push_back(yes_claim("all-gather dispatch equals all-to-all, bit for bit (expert grads too)", ag_equal));
  s.claims.push_back(yes_claim("all-to-all bytes sent equal the formula from the routing on every rank", bytes_ok));
  Json fig = Json::object();
  fig.set("dp", o.world);
  fig.set("tokens_per_rank", o.tokens);
  fig.set("d_model", c.d_model);
  fig.set("experts", c.n_experts);
  fig.set("top_k", c.top_k);
  fig.set("runs", std::move(figure_runs));
  s.figure = Json::object();
  s.figure.set("expert_parallel_bytes", std::move(fig));
  return s;
}

namespace {

struct CapacityRun {
  Tensor y;
  MoeStats stats;
  std::int64_t passed_through = 0;  // tokens with every choice dropped
  bool passed_are_zero = true;
};
CapacityRun capacity_run(double factor, DropPolicy policy, const Tensor& x) {
  MoeConfig c = lesson_config();
  c.top_k = 1;
  c.capacity_factor = factor;
  c.drop_policy = policy;
  MoeLayer layer(c, {});
  CapacityRun run;
  run.y = layer.forward(x);
  run.stats = layer.stats();
  const std::vector<float> y = run.y.to_floats();
  const std::int64_t C = c.d_model;
  for (std::int64_t t = 0; t < x.dim(0); ++t) {
    bool zero = true;
    for (std::int64_t i = 0; i < C; ++i) zero = zero && y[std::size_t(t * C + i)] == 0;
    // With top-1 a dropped assignment is a dropped token.
    run.passed_through += zero ? 1 : 0;
  }
  run.passed_are_zero = run.passed_through == run.stats.dropped;
  return run;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  const std::vector<float> u = a.to_floats(), v = b.to_floats();
  double d = 0, n = 0;
  for (std::size_t i = 0; i < u.size(); ++i) d += (double(u[i]) - v[i]) * (double(u[i]) - v[i]), n += double(v[i]) * v[i];
  return std::sqrt(d / n);
}

}  // namespace

Section capacity_and_dropping() {
  Section s;
  s.title = "Capacity: what overflows is dropped and passes through on the residual";
  const Tensor x = lesson_tokens(64, 16, 51, 0.5f);  // a shared direction: uneven loads
  const CapacityRun none = capacity_run(0, DropPolicy::kProbability, x);
  TextTable t({"capacity factor", "policy", "capacity", "dropped", "tokens passed through",
               "MoE output error vs no drop"});
  t.add({"none", "-", "-", "0", num(none.passed_through), "0"});
  bool grows = true, zero_out = true;
  std::int64_t last = 0, dropped_at_one = 0;
  for (double f : {2.0, 1.25, 1.0}) {
    for (DropPolicy p : {DropPolicy::kProbability, DropPolicy::kPosition}) {
      const CapacityRun r = capacity_run(f, p, x);
      zero_out = zero_out && r.passed_are_zero;
      if (p == DropPolicy::kProbability) grows = grows && r.stats.dropped >= last, last = r.stats.dropped;
      if (f == 1.0) dropped_at_one = std::max(dropped_at_one, r.stats.dropped);
      MoeConfig c = lesson_config();
      c.top_k = 1;
      c.capacity_factor = f;
      t.add({fmt("%.2f", f), drop_policy_name(p), num(expert_capacity(c, 64)),
             fmt("%lld of %lld", static_cast<long long>(r.stats.dropped),
                 static_cast<long long>(r.stats.assignments)),
             num(r.passed_through), fmt("%.3f", rel_l2(r.y, none.y))});
    }
  }
  // The figure's sweep: the dropped fraction and the output's error from 1/4 to 2 times the
  // fair share, on the same tokens (the table's rows are three of its points).
  Json sweep = Json::array();
  for (int eighths = 2; eighths <= 16; ++eighths) {
    const double f = eighths / 8.0;
    for (DropPolicy p : {DropPolicy::kProbability, DropPolicy::kPosition}) {
      const CapacityRun r = capacity_run(f, p, x);
      MoeConfig c = lesson_config();
      c.top_k = 1;
      c.capacity_factor = f;
      Json j = Json::object();
      j.set("capacity_factor", f);
      j.set("policy", drop_policy_name(p));
      j.set("capacity", expert_capacity(c, 64));
      j.set("dropped", r.stats.dropped);
      j.set("assignments", r.stats.assignments);
      j.set("output_error", rel_l2(r.y, none.y));
      sweep.push_back(std::move(j));
    }
  }
  std::string loads;
  Json load_list = Json::array();
  for (std::int64_t n : none.stats.kept) {
    loads += (loads.empty() ? "" : ", ") + num(n);
    load_list.push_back(n);
  }
  s.text = "64 tokens sharing a direction, E 4, top-1; loads without a limit: " + loads + "\n" + t.str();
  s.claims.push_back(yes_claim("no-drop mode drops nothing", none.stats.dropped == 0));
  s.claims.push_back(yes_claim("a smaller capacity factor drops at least as many", grows));
  s.claims.push_back(yes_claim("dropped tokens leave the layer as exact zeros (residual only)", zero_out));
  s.claims.push_back(claim_broken_by(
      "capacity-overflow", {"capacity-overflow run (factor 1.0): no token is dropped", "0",
                            num(dropped_at_one), dropped_at_one == 0}));
  Json fig = Json::object();
  fig.set("tokens", x.dim(0));
  fig.set("experts", lesson_config().n_experts);
  fig.set("top_k", 1);
  fig.set("loads_without_limit", std::move(load_list));
  fig.set("sweep", std::move(sweep));
  s.figure = Json::object();
  s.figure.set("capacity", std::move(fig));
  return s;
}

}  // namespace mixpar::ch09
